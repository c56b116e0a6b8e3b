"""Host parsers on the captured H200: limits, ulimit, the kernel command line, meminfo, sysctl,
df, pip, modules and a NUMA node's CPU list."""

from __future__ import annotations

from infergap.parsers import host as hp
from tests.parsers.inputs import h200


def test_limits_and_ulimit():
    assert hp.parse_limits(h200("files/proc/self/limits"))["Max locked memory"] == ("unlimited", "unlimited", "bytes")
    ul = hp.parse_ulimit(h200("cmds/ulimit.out"))
    assert (ul["-l"], ul["-n"], ul["-s"]) == ("unlimited", "20000", "8192")


def test_kernel_command_line():
    cmd = hp.parse_cmdline(h200("files/proc/cmdline"))
    assert cmd["BOOT_IMAGE"] == "/boot/vmlinuz-6.18.44" and cmd["pci"] == "realloc=off"
    assert cmd["quiet"] is None and "iommu" not in cmd


def test_meminfo_in_bytes():
    mem = hp.parse_meminfo(h200("files/proc/meminfo"))
    assert mem["MemTotal"] == 135148564480 and mem["MemTotal"] % 1024 == 0


def test_sysctl_all():
    s = hp.parse_sysctl_all(h200("cmds/sysctl_all.out"))
    assert (s["kernel.numa_balancing"], s["vm.swappiness"]) == ("0", "60")


def test_df_shm():
    assert hp.parse_df_h(h200("cmds/df.out"))["/dev/shm"] == {"fs": "tmpfs", "size": "128G", "used": "0", "avail": "128G"}
    assert hp.human_size_B("128G") == 128 * 2**30


def test_pip_list_json():
    pkgs = hp.parse_pip_list(h200("cmds/pip_list.out"))
    assert len(pkgs) == 197 and pkgs["accelerate"] == "1.15.0"


def test_modules_and_cpulist():
    assert {"nvidia", "nvidia_uvm"} <= hp.parse_modules(h200("files/proc/modules"))
    assert hp.parse_cpulist(h200("files/sys/devices/system/node/node0/cpulist")) == list(range(16))


def test_ibstat_ports() -> None:
    """ucx#9515: two ConnectX-7 CAs, one port each."""
    from infergap.parsers.host import parse_ibstat
    from tests.parsers.inputs import EVIDENCE

    ports = parse_ibstat((EVIDENCE / "ucx-9515-ibstat.txt").read_text())
    assert [(p["ca"], p["port"], p["state"], p["rate"], p["link"]) for p in ports] == [
        ("mlx5_0", "1", "Active", "400", "InfiniBand"), ("mlx5_1", "1", "Active", "400", "InfiniBand")]


def test_ibv_devinfo_ports_in_ibstats_shape() -> None:
    """DeepEP#60: a RoCE port PORT_DOWN, and a second HCA whose ports the paste cut off."""
    from tests.parsers.inputs import EVIDENCE

    ports = hp.parse_ibv_devinfo((EVIDENCE / "deepep-60-ibv-devinfo.txt").read_text())
    assert ports == [{"ca": "mlx5_12", "firmware": "22.38.1900", "port": "1", "state": "Down", "link": "Ethernet"}]


def test_ibv_devinfo_verbose_gives_the_rate() -> None:
    from tests.parsers.inputs import EVIDENCE

    text = (EVIDENCE / "deepep-60-ibv-devinfo.txt").read_text().replace(
        "PORT_DOWN (1)", "PORT_ACTIVE (4)\n                        active_width:           4X (2)\n"
        "                        active_speed:           25.0 Gbps (32)\n                        phys_state:             LINK_UP (5)")
    (p,) = hp.parse_ibv_devinfo(text)[:1]
    assert (p["state"], p["physical"], p["rate"]) == ("Active", "LinkUp", "100")


def test_the_package_listing_command_lists_what_importlib_metadata_sees():
    """The live ``pip_list`` command (its own reading of each distribution's metadata header) names
    every distribution and version that ``importlib.metadata`` parses, in pip's order, for this
    interpreter's real environment."""
    import importlib.metadata as md
    import json
    import subprocess
    import sys

    from infergap.snapshot.sources import PIP_LIST

    out = subprocess.run([sys.executable, "-c", PIP_LIST], capture_output=True, text=True, timeout=60, check=True).stdout
    # importlib.metadata's own parse, in a child of the same interpreter and path as the command's
    # (this process's path also holds src/, where an editable install leaves an egg-info)
    ref = ("import importlib.metadata as md, json; print(json.dumps(sorted(({'name': d.metadata['Name'], "
           "'version': d.version} for d in md.distributions() if d.metadata['Name']), key=lambda x: x['name'].lower())))")
    want = json.loads(subprocess.run([sys.executable, "-c", ref], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert json.loads(out) == want and len(want) > 10
    assert {p["name"].lower() for p in want} >= {"pydantic", "typer"}
    assert hp.parse_pip_list(out)["pydantic"] == md.version("pydantic")


def test_show_gids_rows() -> None:
    """NCCL#1573: the GID table of two HCAs in a pod (tab-separated, indices 4-7, IPv4 only on the v1/v2 pair of each)."""
    from infergap.parsers.host import parse_show_gids
    from tests.parsers.inputs import EVIDENCE

    gids = parse_show_gids((EVIDENCE / "nccl-1573-show-gids-pod.txt").read_text())
    assert len(gids) == 8 and [g["index"] for g in gids[:4]] == ["4", "5", "6", "7"]
    assert [(g["ca"], g["ver"], g["ipv4"]) for g in gids if g["index"] == "7"] == [("mlx5_0", "v2", "10.152.0.12"), ("mlx5_1", "v2", "10.152.4.12")]
    assert gids[1]["gid"].startswith("fe80") and gids[1]["ipv4"] == ""
