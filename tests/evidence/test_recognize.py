"""Recognising pasted outputs by content: the real H200 capture as loose files, mangled the way
web pages and terminals mangle them, combined into one paste, and bad input."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.evidence.evidence_data import FIX, H200
from infergap.evidence import EvidenceSnapshot, scan_file
from infergap.parsers.host import parse_pip_list, parse_sysctl_all, parse_ulimit
from infergap.parsers.nvsmi import parse_nvsmi_xml, parse_query_csv, parse_topo

# command name -> parse function whose result must not change when the output is pasted
PARSERS = {
    "nvsmi_topo": lambda t: parse_topo(t).model_dump() if hasattr(parse_topo(t), "model_dump") else repr(parse_topo(t)),
    "nvsmi_q": lambda t: [ln.split(":", 1)[0].strip() for ln in t.splitlines() if ":" in ln][:80],
    "nvsmi_qx": lambda t: repr(parse_nvsmi_xml(t)),
    "nvsmi_csv": parse_query_csv,
    "sysctl_all": parse_sysctl_all,
    "ulimit": parse_ulimit,
    "pip_list": parse_pip_list,
    "numactl": lambda t: [ln.split() for ln in t.splitlines()],
    "lscpu": lambda t: [ln.split(":", 1)[0] for ln in t.splitlines()],
}


def original(name: str) -> str:
    return (H200 / "cmds" / f"{name}.out").read_text()


def as_evidence(tmp_path, name: str, text: str, fname: str | None = None):
    p = tmp_path / (fname or f"pasted-{name}.txt")
    p.write_bytes(text.encode())
    return EvidenceSnapshot(None, [p])


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_h200_capture_as_loose_file(tmp_path, name):
    """Each real output, dropped in under a neutral name, answers cmd(<its name>) and parses alike."""
    snap = as_evidence(tmp_path, name, original(name), fname=f"file{len(name)}.txt")
    assert [p.kind for p in snap.parts] == [name]
    res = snap.cmd(name)
    assert res is not None and res.ok
    assert res.source.startswith("evidence/")
    assert PARSERS[name](res.stdout) == PARSERS[name](original(name))


def mangle(text: str, *, crlf=False, ansi=False, indent="", quote=False, nbsp=False, trailing=False) -> str:
    lines = text.split("\n")
    if ansi:
        lines = [f"\x1b[32m{ln}\x1b[0m" if ln else ln for ln in lines]
    if nbsp:
        lines = [ln.replace(" ", "\u00a0", 1) for ln in lines]
    if trailing:
        lines = [ln + "   " if ln else ln for ln in lines]
    lines = [indent + ln if ln else ln for ln in lines]
    if quote:
        lines = ["> " + ln for ln in lines]
    return ("\r\n" if crlf else "\n").join(lines)


MANGLES = [dict(crlf=True), dict(ansi=True), dict(indent="    "), dict(indent="\t"), dict(quote=True),
           dict(crlf=True, ansi=True, indent="  "), dict(nbsp=True)]


@pytest.mark.parametrize("name", ["nvsmi_topo", "nvsmi_q", "nvsmi_qx", "nvsmi_csv", "sysctl_all", "ulimit", "numactl", "lscpu", "pip_list"])
@pytest.mark.parametrize("how", range(len(MANGLES)), ids=lambda i: "+".join(MANGLES[i]))
def test_h200_capture_mangled(tmp_path, name, how):
    """CRLF, colour codes, indentation, Markdown quotes and NBSPs: same kind, same parse."""
    snap = as_evidence(tmp_path, name, mangle(original(name), **MANGLES[how]))
    assert [p.kind for p in snap.parts] == [name]
    got = snap.cmd(name).stdout
    assert PARSERS[name](got) == PARSERS[name](original(name))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["nvsmi_topo", "nvsmi_q", "nvsmi_csv", "sysctl_all", "ulimit", "numactl", "lscpu"]),
       crlf=st.booleans(), ansi=st.booleans(), indent=st.sampled_from(["", " ", "    ", "\t", "  \t"]), quote=st.booleans(),
       trailing=st.booleans())
def test_mangling_fuzz(tmp_path, name, crlf, ansi, indent, quote, trailing):
    snap = as_evidence(tmp_path, name, mangle(original(name), crlf=crlf, ansi=ansi, indent=indent, quote=quote, trailing=trailing))
    assert [p.kind for p in snap.parts] == [name]
    if not trailing:
        assert PARSERS[name](snap.cmd(name).stdout) == PARSERS[name](original(name))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3000) | st.text(max_size=3000))
def test_any_content_never_raises(tmp_path, data):
    p = tmp_path / "blob"
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    parts, unknown = scan_file(p)
    assert parts or unknown
    for part in parts:
        list(part.iter_lines())


def test_combined_paste_is_split(tmp_path):
    """A bug report pasting several outputs one after another, with prompts and commentary."""
    nccl = (FIX / "nccl-1232-two-nodes.log").read_text()
    sglang = (FIX / "sglang-13023-decode-no-graph.log").read_text()
    text = (
        "Here is my setup.\n\n$ nvidia-smi topo -m\n" + original("nvsmi_topo")
        + "\nroot@gpu-host:~# numactl -H\n" + original("numactl")
        + "\n```\n" + original("nvsmi_csv") + "```\n\nNCCL log:\n" + nccl
        + "\nand the server log:\n\n" + sglang
        + "\n$ sysctl -a\n" + original("sysctl_all")
    )
    snap = as_evidence(tmp_path, "combined", text)
    kinds = [p.kind for p in snap.parts]
    assert kinds == ["nvsmi_topo", "numactl", "nvsmi_csv", "nccl_log", "sglang_log", "sysctl_all"]
    assert all(p.label.startswith("evidence/pasted-combined.txt#L") for p in snap.parts)
    assert parse_topo(snap.cmd("nvsmi_topo").stdout) == parse_topo(original("nvsmi_topo"))
    assert parse_sysctl_all(snap.cmd("sysctl_all").stdout) == parse_sysctl_all(original("sysctl_all"))
    assert snap.read_value("/proc/sys/vm/swappiness") == "60"
    assert snap.source_of("/proc/sys/vm/swappiness").startswith("evidence/pasted-combined.txt#L")
    assert len(snap.evidence_parts("nccl_log")) == 1 and len(snap.evidence_parts("engine_log")) == 1
    assert not snap.unrecognized()


def test_evidence_only_where_base_lacks_it(tmp_path):
    """A real snapshot keeps its own successful outputs; a failed command (lspci: rc 127) is
    answered from the evidence."""
    from infergap.snapshot import open_snapshot

    lspci = "00:00.0 Host bridge [0600]: Intel Corporation 440FX - 82441FX PMC [Natoma] [8086:1237] (rev 02)\n"
    (tmp_path / "lspci.txt").write_text(lspci)
    (tmp_path / "topo.txt").write_text((FIX / "topo-667-pxb-pix.txt").read_text())
    snap = EvidenceSnapshot(open_snapshot(H200), [tmp_path / "lspci.txt", tmp_path / "topo.txt"])
    assert snap.cmd("nvsmi_topo").source == "cmds/nvsmi_topo.out"  # the base ran it successfully
    assert snap.cmd("lspci").stdout == lspci and snap.cmd("lspci").source == "evidence/lspci.txt"


def test_snapshot_evidence_folder(tmp_path):
    """Files dropped into a snapshot directory's evidence/ folder are read too."""
    from infergap.evidence.overlay import open_with_evidence

    snapdir = tmp_path / "snap"
    shutil.copytree(H200, snapdir)
    (snapdir / "evidence").mkdir()
    shutil.copy(FIX / "vllm-13719-custom-ar.log", snapdir / "evidence" / "server.log")
    snap = open_with_evidence(snapdir, [])
    assert [p.kind for p in snap.evidence_parts("engine_log")] == ["vllm_log"]


EMPTY = "empty file (or only NUL bytes and blanks)"


@pytest.mark.parametrize("content,reason", [(b"", EMPTY), (b"\n\n  \n", EMPTY), (b"\x00" * 70000 + b"\n", EMPTY),
                                            (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8, "binary file, not text"),
                                            (b"just some words\nthat are not\nany output\nwe know\nof at all\n", "not a known output or log")])
def test_bad_files_are_listed(tmp_path, content, reason):
    p = tmp_path / "bad.bin"
    p.write_bytes(content)
    snap = EvidenceSnapshot(None, [p])
    assert snap.parts == []
    assert [(u.path.name, u.reason) for u in snap.unrecognized()] == [("bad.bin", reason)]
    from types import SimpleNamespace

    from infergap.investigators import evidence_files

    (f,) = evidence_files.investigate(SimpleNamespace(snap=snap))
    assert f.id == "evidence.unrecognized" and f.status.value == "unknown" and reason in f.title


def test_nul_runs_in_a_kernel_log_do_not_hide_its_xid(tmp_path):
    """A syslog rotated with copytruncate, or written during a crash, holds runs of NUL bytes; the
    file was called binary and its Xid never reported. The real Xid 48 paste, with 64 KiB of NULs
    before it and a NUL run inside one of its lines, gives the same findings as the paste alone."""
    from types import SimpleNamespace

    from infergap.investigators import evidence_files

    def xids(path):
        snap = EvidenceSnapshot(None, [path])
        return sorted((f.id, f.severity.value if f.severity else None, f.title)
                      for f in evidence_files.investigate(SimpleNamespace(snap=snap)) if f.id == "gpu.xid")

    real = FIX / "nvidiadocker-849-xid48-dbe.txt"
    raw = real.read_bytes()
    cut = raw.index(b"Xid")
    nul = tmp_path / "syslog"
    nul.write_bytes(b"\x00" * 65536 + raw[:cut] + b"\x00" * 300 + raw[cut:])
    assert xids(real) and xids(nul) == xids(real)
    exe = tmp_path / "python"  # a real executable stays binary without its NULs
    exe.write_bytes(Path(sys.executable).resolve().read_bytes()[:65536])
    assert [u.reason for u in EvidenceSnapshot(None, [exe]).unrecognized()] == ["binary file, not text"]


def test_log_cut_mid_line(tmp_path):
    """A log whose last line is cut in the middle still yields what it shows."""
    text = (FIX / "sglang-13023-decode-no-graph.log").read_text()
    p = tmp_path / "cut.log"
    p.write_text(text[: len(text) - 40])
    from infergap.facts.logs import engine_logs

    snap = EvidenceSnapshot(None, [p])
    ((part, facts),) = engine_logs(snap)
    assert facts.decode_batches == 8 and facts.decode_no_graph == 2


def test_traceback_behind_a_ray_actor_prefix(tmp_path):
    """Excerpt of https://github.com/hiyouga/EasyR1/issues/579: Ray prefixes each line of the
    actor's traceback with ``(Runner pid=N) ``; the paste is a traceback, not an unknown file."""
    p = tmp_path / "ray.txt"
    p.write_text("(Runner pid=16018) torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
                 "c10d/ProcessGroupNCCL.cpp:3699, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
                 "(Runner pid=16018) ncclUnhandledCudaError: Call to CUDA function failed.\n"
                 "(Runner pid=16018) Last error:\n"
                 "(Runner pid=16018) Cuda failure 217 'peer access is not supported between these\n")
    parts, unknown = scan_file(p)
    assert [x.kind for x in parts] == ["traceback"] and not unknown


def test_pip_freeze_and_plain_list_normalised(tmp_path):
    (tmp_path / "freeze.txt").write_text("torch==2.8.0\nsglang[all]==0.5.1.post3\nflashinfer-python==0.2.14\n")
    snap = EvidenceSnapshot(None, [tmp_path / "freeze.txt"])
    assert json.loads(snap.cmd("pip_list").stdout) == [{"name": "torch", "version": "2.8.0"}, {"name": "sglang", "version": "0.5.1.post3"},
                                                       {"name": "flashinfer-python", "version": "0.2.14"}]
    (tmp_path / "list.txt").write_text("Package           Version\n----------------- -------\ntorch             2.8.0\nvllm              0.10.2\n")
    snap = EvidenceSnapshot(None, [tmp_path / "list.txt"])
    assert parse_pip_list(snap.cmd("pip_list").stdout) == {"torch": "2.8.0", "vllm": "0.10.2"}


@pytest.mark.parametrize("name,kind", [("topo-2079-rtx5880-node.txt", "nvsmi_topo"), ("topo-667-pxb-pix.txt", "nvsmi_topo")])
def test_public_topologies_recognised(name, kind):
    parts, unknown = scan_file(FIX / name)
    assert [p.kind for p in parts] == [kind] and not unknown
    snap = EvidenceSnapshot(None, [FIX / name])
    topo = parse_topo(snap.cmd("nvsmi_topo").stdout)
    assert topo is not None


def _two_gpu_capture(tmp_path):
    import tarfile

    with tarfile.open(H200.parent / "h200-2gpu-collect.tar.gz") as tf:
        tf.extractall(tmp_path, filter="data")
    (root,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return root


def test_two_h200_capture_outputs_as_loose_files(tmp_path):
    """Every non-empty output of the real 2×H200 capture, renamed, is recognised as its command."""
    root = _two_gpu_capture(tmp_path)
    checked = 0
    for out in sorted((root / "cmds").glob("*.out")):
        name = out.stem
        if not out.read_text().strip() or name in ("lscpu_json", "modules_installed", "boot_ls", "dmidecode", "cpupower",
                                                     "systemd_detect_virt", "systemd_detect_virt_c", "firmware", "iommu_ls"):
            continue
        snap = EvidenceSnapshot(None, [out])
        assert [p.kind for p in snap.parts] == [name], name
        assert snap.cmd(name).ok
        checked += 1
    assert checked >= 15


def test_two_h200_nccl_log(tmp_path):
    """The NCCL_DEBUG=INFO log of the capture's all-reduce over two NVLinked H200s: P2P/CUMEM, ok."""
    from types import SimpleNamespace

    from infergap.investigators import nccl_log

    root = _two_gpu_capture(tmp_path)
    log = tmp_path / "allreduce.log"
    log.write_text(json.loads((root / "probes" / "active.json").read_text())["nccl_log"])
    found = {f.id: f for f in nccl_log.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, [log]), server=None))}
    assert found["nccl.transport"].status.value == "ok" and "P2P/CUMEM" in found["nccl.transport"].title
    assert found["nccl.version"].title.startswith("NCCL 2.28.9")
    assert "NCCL_NVLS_ENABLE" in found["nccl.env"].title
