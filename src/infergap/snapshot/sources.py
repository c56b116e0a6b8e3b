"""The source registry: which files, commands and probes a snapshot holds, under which names.

Command names match the real capture in the project's fixtures (``cmds/nvsmi_qx.out`` is
``nvidia-smi -q -x``); a snapshot written by ``infergap collect`` uses the same names, so the
parsers read a live host, a captured archive and a hand-made fixture identically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Columns of ``nvidia-smi --query-gpu`` stored as ``cmds/nvsmi_csv.out`` (names from
#: ``nvidia-smi --help-query-gpu``).
NVSMI_CSV_FIELDS = (
    "name,pci.bus_id,driver_version,pstate,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max,clocks.current.sm,clocks.max.sm,"
    "clocks.current.memory,power.draw,power.limit,enforced.power.limit,power.max_limit,"
    "temperature.gpu,ecc.mode.current,persistence_mode,compute_mode,mig.mode.current,"
    "clocks_event_reasons.active"
)

#: ``pip list --format=json`` output from importlib.metadata (pip itself takes ~1 s to start).
PIP_LIST = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted(({'name': d.metadata['Name'], 'version': d.version} for d in m.distributions() if d.metadata['Name']), key=lambda x: x['name'].lower())))"
)

TORCH_PROBE = r"""
import json, torch
d = {"torch": torch.__version__, "cuda": torch.version.cuda, "devs": 0, "props": [], "p2p": []}
try:
    d["arch_list"] = torch.cuda.get_arch_list()
    n = torch.cuda.device_count(); d["devs"] = n
    d["props"] = [str(torch.cuda.get_device_properties(i)) for i in range(n)]
    d["capability"] = [list(torch.cuda.get_device_capability(i)) for i in range(n)]
    d["p2p"] = [[None if i == j else bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)]
    d["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if n else None
except Exception as e:
    d["error"] = repr(e)
print(json.dumps(d))
"""


#: The kernel log's GPU, PCIe and IOMMU lines (Xid, NVRM, AER, DMAR), the newest 5,000: all the
#: audit reads of it, and nothing else of a log that names devices, addresses and users. Exit 1
#: with dmesg's own message when the log cannot be read (``kernel.dmesg_restrict`` without root).
KERNEL_LOG = ("out=$(dmesg 2>&1) || { printf '%s\\n' \"$out\" >&2; exit 1; }; "
              "printf '%s\\n' \"$out\" | grep -E 'NVRM|Xid|nvidia|AER|pcieport|DMAR|IOMMU|iommu' | tail -n 5000; exit 0")


@dataclass(frozen=True)
class Command:
    """A named command: argv, its timeout in seconds, and whether live audits run it.

    ``live`` is False for commands too slow for the interactive audit (importing torch takes
    seconds); ``infergap collect`` runs every command.
    """

    name: str
    argv: tuple[str, ...]
    timeout_s: float = 10.0
    live: bool = True
    env: dict[str, str] = field(default_factory=dict)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in [
        Command("uname", ("uname", "-a")),
        Command("lscpu", ("lscpu",)),
        Command("lscpu_json", ("lscpu", "-J")),
        Command("numactl", ("numactl", "-H")),
        Command("ulimit", ("bash", "-c", "ulimit -a")),
        Command("nvsmi", ("nvidia-smi",), 20),
        Command("nvsmi_q", ("nvidia-smi", "-q"), 20),
        Command("nvsmi_qx", ("nvidia-smi", "-q", "-x"), 20),
        Command("nvsmi_topo", ("nvidia-smi", "topo", "-m"), 20),
        Command("nvsmi_nvlink", ("nvidia-smi", "nvlink", "-s"), 20),
        Command("nvsmi_p2p", ("nvidia-smi", "topo", "-p2p", "r"), 20),
        Command("nvsmi_csv", ("nvidia-smi", f"--query-gpu={NVSMI_CSV_FIELDS}", "--format=csv"), 20),
        Command("sysctl_all", ("sysctl", "-a")),
        Command("pip_list", ("python3", "-c", PIP_LIST), 20),
        Command("df", ("df", "-h", "/dev/shm", "/")),
        Command("torch", ("python3", "-c", TORCH_PROBE), 90, live=False),
        Command("lspci", ("lspci", "-nn")),
        Command("lspci_vvv", ("lspci", "-vvv", "-nn")),
        Command("lspci_tree", ("lspci", "-tv")),
        Command("dmidecode", ("dmidecode", "-t", "bios", "-t", "system")),
        Command("systemd_detect_virt", ("systemd-detect-virt",)),
        Command("systemd_detect_virt_c", ("systemd-detect-virt", "-c")),
        Command("modules_installed", ("ls", "-1", "/lib/modules")),
        Command("boot_ls", ("ls", "-1", "/boot")),
        Command("nvcc", ("nvcc", "--version")),
        Command("cpupower", ("cpupower", "idle-info")),
        Command("kernel_log", ("bash", "-c", KERNEL_LOG), 20),
    ]
}

#: Files (glob patterns, absolute host paths) a snapshot holds. ``config`` of PCI functions is
#: stored as ``config.hex`` (``od -An -tx1 -v`` text) and symlinks as ``<name>.link`` (the target).
FILE_GLOBS: tuple[str, ...] = (
    "/etc/os-release",
    "/etc/nccl.conf",
    "/proc/version",
    "/proc/cmdline",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/modules",
    "/proc/mounts",
    "/proc/swaps",
    "/proc/iomem",
    "/proc/self/limits",
    "/proc/self/cgroup",
    "/proc/self/status",
    "/proc/self/mountinfo",
    "/proc/1/cgroup",
    "/proc/1/environ",
    "/proc/1/comm",
    "/proc/1/sched",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia/params",
    "/proc/driver/nvidia/gpus/*/information",
    "/proc/driver/nvidia/gpus/*/registry",
    "/proc/sys/kernel/numa_balancing",
    "/proc/sys/kernel/nmi_watchdog",
    "/proc/sys/kernel/sched_autogroup_enabled",
    "/proc/sys/kernel/perf_event_paranoid",
    "/proc/sys/kernel/osrelease",
    "/proc/sys/vm/swappiness",
    "/proc/sys/vm/zone_reclaim_mode",
    "/proc/sys/vm/overcommit_memory",
    "/proc/sys/fs/file-max",
    "/proc/sys/net/core/rmem_max",
    "/proc/sys/net/core/wmem_max",
    "/proc/sys/net/core/rmem_default",
    "/proc/sys/net/core/wmem_default",
    "/proc/sys/net/ipv4/tcp_rmem",
    "/proc/sys/net/ipv4/tcp_wmem",
    "/sys/bus/pci/devices/*/vendor",
    "/sys/bus/pci/devices/*/device",
    "/sys/bus/pci/devices/*/class",
    "/sys/bus/pci/devices/*/subsystem_vendor",
    "/sys/bus/pci/devices/*/subsystem_device",
    "/sys/bus/pci/devices/*/numa_node",
    "/sys/bus/pci/devices/*/local_cpulist",
    "/sys/bus/pci/devices/*/current_link_speed",
    "/sys/bus/pci/devices/*/current_link_width",
    "/sys/bus/pci/devices/*/max_link_speed",
    "/sys/bus/pci/devices/*/max_link_width",
    "/sys/bus/pci/devices/*/resource",
    "/sys/bus/pci/devices/*/driver_override",
    "/sys/bus/pci/devices/*/driver.link",
    "/sys/bus/pci/devices/*/iommu_group.link",
    "/sys/bus/pci/devices/*/config.hex",
    "/sys/bus/pci/devices/*.link",
    "/sys/kernel/iommu_groups/*/type",
    "/sys/class/iommu/*/uevent",
    "/sys/class/infiniband/*/node_type",
    "/sys/class/dmi/id/bios_vendor",
    "/sys/class/dmi/id/bios_version",
    "/sys/class/dmi/id/bios_date",
    "/sys/class/dmi/id/sys_vendor",
    "/sys/class/dmi/id/product_name",
    "/sys/firmware/efi/fw_platform_size",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/transparent_hugepage/defrag",
    "/sys/module/nvidia/version",
    "/sys/module/nvidia_uvm/version",
    "/sys/module/nvidia_peermem/version",
    "/sys/module/nvidia_peermem/initstate",
    "/sys/module/nvidia/parameters/NVreg_EnableStreamMemOPs",
    "/sys/devices/system/node/node*/cpulist",
    "/sys/devices/system/node/node*/distance",
    "/sys/devices/system/node/node*/meminfo",
    "/sys/devices/system/cpu/online",
    "/sys/devices/system/cpu/smt/control",
    "/sys/devices/system/cpu/cpuidle/current_driver",
    "/sys/devices/system/cpu/cpuidle/current_governor",
    "/sys/devices/system/cpu/cpuidle/current_governor_ro",
    "/sys/devices/system/cpu/cpuidle/available_governors",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/name",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/latency",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/disable",
    "/sys/devices/system/cpu/cpu*/cpufreq/scaling_driver",
    "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor",
    "/sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors",
    "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
    "/sys/devices/system/cpu/cpufreq/boost",
    "/sys/devices/system/cpu/amd_pstate/status",
    "/sys/devices/system/cpu/intel_pstate/status",
    "/sys/devices/system/cpu/intel_pstate/no_turbo",
    "/sys/fs/cgroup/cpu.max",
    "/sys/fs/cgroup/cpuset.cpus.effective",
    "/sys/fs/cgroup/memory.max",
    "/.dockerenv",
    "/run/.containerenv",
)

#: Environment variables kept by collection: everything else is scrubbed.
ENV_PREFIXES = ("NCCL_", "CUDA_", "NVIDIA_", "NV_", "TORCH_CUDA", "GPU_", "CUBLAS", "CUDNN")
#: Names that are dropped even with a kept prefix.
ENV_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
