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

#: ``pip list --format=json`` output from importlib.metadata (pip itself takes ~1 s to start). Name
#: and version are read from the header of each distribution's metadata file (the lines before the
#: first blank one, where the core metadata spec puts them), the files ``Distribution.metadata``
#: reads, in its order: parsing the whole file with the email parser, three times a distribution
#: as ``d.metadata['Name']`` and ``d.version`` did, took half the command's CPU time (0.36 s -> 0.19
#: s for 74 distributions on the CI machine, same output).
PIP_LIST = """import importlib.metadata as m, json
def nv(d):
    n = v = None
    for line in (d.read_text('METADATA') or d.read_text('PKG-INFO') or d.read_text('') or '').splitlines():
        if not line.strip():
            break
        k, _, val = line.partition(':')
        k = k.strip().lower()
        if k == 'name' and n is None:
            n = val.strip()
        elif k == 'version' and v is None:
            v = val.strip()
    return n, v
print(json.dumps(sorted(({'name': n, 'version': v} for n, v in map(nv, m.distributions()) if n), key=lambda x: x['name'].lower())))
"""

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


@dataclass(frozen=True)
class Source:
    """One source of host evidence, declared once: how it is collected live, how a pasted copy is
    recognised, which parser reads it and which facts it yields.

    ``kind``: the name of the source (``cmds/<kind>.out`` for a command; the kind of a pasted
    part). ``what``: what a person would call it (``nvidia-smi topo -m``). ``command``: how it is
    collected live (argv and timeout), None for a source that only comes pasted (logs) or as a
    file. ``serves``: how a pasted copy answers the snapshot (``cmd:<name>`` is
    ``Snapshot.cmd(name)``, ``file:<path>`` is ``Snapshot.read(path)``, ``log`` is read as a part).
    ``start``: the regular expression of its first line (a start marker, tested on the stripped
    line); ``prompt``: of the shell command that prints it after a prompt (``$ nvidia-smi topo -m``),
    with ``prompt_rank`` ordering the prompt tests (a more specific command first); ``repeats``: its
    start marker comes back inside one copy (every line of ``sysctl -a``, each matrix of
    ``p2pBandwidthLatencyTest``), so a marker of the same kind continues the part; ``lead``: of a
    line that, directly before the start marker, is the output's own first line although too
    common to be a marker itself (``Name:`` above ``Namespace:`` in ``kubectl describe pod``):
    pasted without its prompt, the part begins there; ``holds_log_lines``:
    lines that look like a log or a failure signature belong to the output (``Device=0 CANNOT Access
    Peer Device=1`` inside ``p2pBandwidthLatencyTest``, pip lines inside ``collect_env``). ``parser``: the
    function that turns its text into values (``module:function`` under ``infergap.parsers`` or,
    for the version listings, ``infergap.evidence``). ``facts``: the accessors of
    :class:`infergap.facts.Facts` (or the modules of ``infergap.facts``) it yields. ``sample``: a
    real copy in the project's fixtures, relative to ``tests/fixtures`` (``evidence/…``,
    ``hosts/…``, or ``capture:cmds/<name>`` of the two-H200 capture; ``capture:pip_freeze`` and
    ``capture:pip_text`` are that capture's package list printed in those formats).

    A log (no first line of its own) is recognised line by line: ``line_test`` names the parser
    module's ``is_…_line`` function (``module:function`` under ``infergap.parsers``) that says
    whether a cleaned line is one of its lines (NCCL's ``host:pid:tid [dev] NCCL INFO``);
    ``log_rank`` orders the log kinds (the line tests run in that order, the first kind a line
    matches takes it, and a part of mixed lines with no engine among them takes the first kind
    it holds); ``interleaves``: its lines come inside other logs (NCCL's inside an engine's), so
    its test runs on every line and a line may be both; ``family``: ``engine`` for an inference
    engine's log (one family when a paste is split, and every engine log joins
    ``Facts.engine_logs``). ``reads``: what the parser is given, ``lines`` (the part's cleaned
    lines, streamed) or ``text`` (the part as one string).
    """

    kind: str
    what: str
    command: Command | None = None
    serves: str = "log"
    start: str | None = None
    prompt: str | None = None
    prompt_rank: int = 100
    repeats: bool = False
    lead: str | None = None
    holds_log_lines: bool = False
    parser: str | None = None
    facts: tuple[str, ...] = ()
    sample: str | None = None
    line_test: str | None = None
    log_rank: int | None = None
    interleaves: bool = False
    family: str | None = None
    reads: str = "lines"


def _cmd(name: str, *argv: str, timeout_s: float = 10.0, live: bool = True) -> Command:
    return Command(name, tuple(argv), timeout_s, live)


_P = "infergap.parsers."
#: Every source, in the order the recogniser tests start markers (a more specific marker first);
#: :data:`COMMANDS` keeps the order of ``infergap collect``.
SOURCES: tuple[Source, ...] = (
    Source("nvsmi_q", "nvidia-smi -q", _cmd("nvsmi_q", "nvidia-smi", "-q", timeout_s=20), "cmd:nvsmi_q", start=r"^=+\s*NVSMI LOG\s*=+",
           prompt=r"nvidia-smi\s+(?:-q|--query)\b(?!-)", prompt_rank=4, parser=_P + "nvsmi:parse_nvsmi_q_text",
           facts=("gpus", "driver_version", "cuda_driver_version"), sample="capture:cmds/nvsmi_q"),
    Source("nvsmi_q_part", "sections of nvidia-smi -q pasted without their header", serves="cmd:nvsmi_q",
           start=r"^(?:Clocks (?:Event|Throttle) Reasons(?: Counters)?|Max Customer Boost Clocks|GPU Link Info|(?:GPU )?Power Readings|Max Clocks|Clocks|"
                 r"Applications Clocks|Remapped Rows|ECC Errors|FB Memory Usage|BAR1 Memory Usage|vGPU Software Licensed Product|GPU Virtualization Mode)$|^Performance State\s{1,40}: P\d{1,2}$",
           repeats=True, parser=_P + "nvsmi:parse_nvsmi_q_fragment", facts=("gpus",), sample="evidence/nvsmiq-gpustat135-clocks.txt"),
    Source("nvsmi_qx", "nvidia-smi -q -x", _cmd("nvsmi_qx", "nvidia-smi", "-q", "-x", timeout_s=20), "cmd:nvsmi_qx",
           start=r"^(<\?xml version|<!DOCTYPE nvidia_smi_log|<nvidia_smi_log>)", prompt=r"nvidia-smi\s+(?:-q\s+-x|-x\s+-q|-qx|-xq)", prompt_rank=3,
           parser=_P + "nvsmi:parse_nvsmi_xml", facts=("nvsmi_xml", "gpus"), sample="capture:cmds/nvsmi_qx"),
    Source("nvsmi_qx_part", "sections of nvidia-smi -q -x pasted without their document", serves="cmd:nvsmi_qx",
           start=r"^<(?:clocks_event_reasons|clocks_throttle_reasons|clocks_event_reasons_counters|clocks|max_clocks|max_customer_boost_clocks|"
                 r"pci|temperature|gpu_power_readings|power_readings|ecc_errors|ecc_mode|fb_memory_usage|bar1_memory_usage|mig_mode|remapped_rows)>$"
                 # a paste that starts inside the clock-event section (telegraf#16569)
                 r"|^<clocks_(?:event|throttle)_reasons?_\w{1,60}>[^<]{0,40}</clocks_(?:event|throttle)_reasons?_\w{1,60}>$",
           repeats=True, parser=_P + "nvsmi:parse_nvsmi_xml_fragment", facts=("nvsmi_xml", "gpus"), sample="evidence/nvsmiqx-telegraf16569-fragment.xml"),
    Source("nvsmi", "nvidia-smi", _cmd("nvsmi", "nvidia-smi", timeout_s=20), "cmd:nvsmi",
           start=r"^(?:\|\s*NVIDIA-SMI \d|`?\|?\s*NVIDIA-SMI \S+\s+Driver Version:)",
           parser=_P + "nvsmi:parse_nvsmi_table", facts=("gpus", "driver_version", "cuda_driver_version"), sample="capture:cmds/nvsmi"),
    Source("nvsmi_topo", "nvidia-smi topo -m", _cmd("nvsmi_topo", "nvidia-smi", "topo", "-m", timeout_s=20), "cmd:nvsmi_topo",
           # device names are sometimes printed without the tab between them ("NIC8NIC9", vllm#13855)
           start=r"^GPU0(?:\s+(?:(?:GPU\d+|NIC\d+)+|mlx\S+|\S+_\d+))*\s+CPU Affinity", prompt=r"nvidia-smi\s+topo\s+(?:-m|--matrix)", prompt_rank=0,
           parser=_P + "nvsmi:parse_topo", facts=("topology", "nvlink_between_gpus"), sample="capture:cmds/nvsmi_topo"),
    Source("nvsmi_p2p", "nvidia-smi topo -p2p r", _cmd("nvsmi_p2p", "nvidia-smi", "topo", "-p2p", "r", timeout_s=20), "cmd:nvsmi_p2p",
           start=r"^GPU0(?:\s+GPU\d+)*\s*$", prompt=r"nvidia-smi\s+topo\s+-p2p", prompt_rank=1,
           parser=_P + "nvsmi:parse_p2p", facts=("p2p", "p2p_status"), sample="capture:cmds/nvsmi_p2p"),
    Source("nvsmi_nvlink", "nvidia-smi nvlink -s", _cmd("nvsmi_nvlink", "nvidia-smi", "nvlink", "-s", timeout_s=20), "cmd:nvsmi_nvlink",
           start=r"^GPU \d+: .*\((?:UUID|uuid): ", prompt=r"nvidia-smi\s+nvlink", prompt_rank=2,
           repeats=True, parser=_P + "nvsmi:parse_nvlink_status", facts=(), sample="capture:cmds/nvsmi_nvlink"),
    Source("nvsmi_csv", "nvidia-smi --query-gpu CSV", _cmd("nvsmi_csv", "nvidia-smi", f"--query-gpu={NVSMI_CSV_FIELDS}", "--format=csv", timeout_s=20),
           "cmd:nvsmi_csv", start=r"^(?:index, )?(?:name|pci\.bus_id|uuid|driver_version|index)(?:, [\w.]+(?: \[[^\]]*\])?){2,}",
           prompt=r"nvidia-smi\s+--query-gpu", prompt_rank=5, parser=_P + "nvsmi:parse_query_csv", facts=("gpus", "driver_version"), sample="capture:cmds/nvsmi_csv"),
    Source("lspci", "lspci -nn", _cmd("lspci", "lspci", "-nn"), "cmd:lspci",
           start=r"^(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] [A-Za-z][^:]*(?: \[[0-9a-f]{4}\])?: \S", prompt=r"lspci\b", prompt_rank=8,
           repeats=True, parser=_P + "pci:parse_lspci_vvv", facts=("pci_functions", "rdma_devices"), sample="evidence/lspci-torchipc17-plx.txt"),
    Source("lspci_tree", "lspci -tv", _cmd("lspci_tree", "lspci", "-tv"), "cmd:lspci_tree", start=r"^(?:-\+-|-|\+-|\\-)\[[0-9a-f]{4}:[0-9a-f]{2}\]-",
           prompt=r"lspci\b.*-t", prompt_rank=6, repeats=True, parser=None, sample="evidence/lspci-tree-club3090-859.txt"),
    Source("lspci_vvv", "lspci -vvv", _cmd("lspci_vvv", "lspci", "-vvv", "-nn"), "cmd:lspci_vvv",
           # link registers copied out of an lspci -vv block without its header (lspci -vv | grep Lnk)
           start=r"^Lnk(?:Cap|Sta):\s+(?:Port #\d+, )?Speed ", prompt=r"lspci\b.*-v", prompt_rank=7,
           parser=_P + "pci:parse_lspci_vvv", facts=("pci_functions", "upstream", "unaddressed_links"), sample="hosts/seed-8x-rtxpro6000/cmds/lspci_vvv.out"),
    Source("numactl", "numactl -H", _cmd("numactl", "numactl", "-H"), "cmd:numactl", start=r"^available: \d+ nodes? \(",
           prompt=r"numactl\s+(?:-H|--hardware)", prompt_rank=10, parser=_P + "host:parse_numactl", facts=("numa_nodes",), sample="capture:cmds/numactl"),
    Source("lscpu", "lscpu", _cmd("lscpu", "lscpu"), "cmd:lscpu", start=r"^Architecture:\s+\S", prompt=r"\blscpu\b", prompt_rank=11,
           parser=None, sample="capture:cmds/lscpu"),
    Source("sysctl_all", "sysctl -a", _cmd("sysctl_all", "sysctl", "-a"), "cmd:sysctl_all", start=r"^[a-z][a-z0-9_]*(?:\.[\w\-/*:@+]+)+ = ",
           prompt=r"\bsysctl\b", prompt_rank=12, repeats=True, parser=_P + "host:parse_sysctl_all", facts=("sysctl_all", "sysctl"), sample="capture:cmds/sysctl_all"),
    Source("ulimit", "ulimit -a", _cmd("ulimit", "bash", "-c", "ulimit -a"), "cmd:ulimit",
           start=r"^(?:real-time non-blocking time|core file size|data seg size|max locked memory|open files)\s+\([^)]*-[a-zA-Z]\)\s",
           prompt=r"\bulimit\s+-a", prompt_rank=13, repeats=True, parser=_P + "host:parse_ulimit", facts=("limits",), sample="capture:cmds/ulimit"),
    Source("cmdline", "/proc/cmdline", serves="file:/proc/cmdline", start=r"^(?:BOOT_IMAGE=\S+|initrd=\S+)(?: \S+)*$", prompt=r"/proc/cmdline",
           prompt_rank=14, repeats=True, parser=_P + "host:parse_cmdline", facts=("cmdline",), sample="evidence/cmdline-rccl1129-iommu-pt.txt"),
    Source("uname", "uname -a", _cmd("uname", "uname", "-a"), "cmd:uname",
           start=r"^Linux \S+ \d+\.\d+\S* #\d+\S*(?: \S+)* (?:GNU/Linux|x86_64|aarch64)$", prompt=r"\buname\b", prompt_rank=15,
           parser=_P + "host:parse_uname", facts=("kernel_release",), sample="capture:cmds/uname"),
    Source("pip_list", "pip list --format=json", _cmd("pip_list", "python3", "-c", PIP_LIST, timeout_s=20), "cmd:pip_list", start=r'^\[\{"name": ?"',
           prompt=r"\bpip3?\s+freeze|pip\s+list|-m pip (?:list|freeze)", prompt_rank=16, parser=_P + "host:parse_pip_list",
           facts=("pip_packages",), sample="capture:cmds/pip_list"),
    Source("pip_text", "pip list", serves="cmd:pip_list", start=r"^Package\s+Version(?:\s+(?:Editable project location|Location|Installer))*\s*$",
           parser=_P + "host:parse_pip_lines", facts=("pip_packages",), sample="capture:pip_text"),
    Source("pip_freeze", "pip freeze", serves="cmd:pip_list",
           start=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*(?:\[[\w,\-]+\])?(?:==[\w.+!\-]+| @ (?:file|https?|git\+)\S+)$",
           repeats=True, parser=_P + "host:parse_pip_lines", facts=("pip_packages",), sample="capture:pip_freeze"),
    Source("nvcc", "nvcc --version", _cmd("nvcc", "nvcc", "--version"), "cmd:nvcc", start=r"^nvcc: NVIDIA \(R\) Cuda compiler driver",
           prompt=r"\bnvcc\b", prompt_rank=17, parser=None, sample="evidence/nvcc-risc0-2449.txt"),
    Source("df", "df -h", _cmd("df", "df", "-h", "/dev/shm", "/"), "cmd:df", start=r"^Filesystem\s+(?:Size|1K-blocks|1M-blocks)\s+Used\s+Avail",
           parser=_P + "host:parse_df_h", facts=(), sample="capture:cmds/df"),
    Source("torch", "infergap's torch probe (JSON)", _cmd("torch", "python3", "-c", TORCH_PROBE, timeout_s=90, live=False), "cmd:torch",
           start=r'^\{"torch": ?"', parser="json:loads", facts=("torch_info", "compute_capabilities"), sample="capture:cmds/torch"),
    Source("env", "environment (GPU/CUDA/NCCL variables)", serves="cmd:env",
           start=r"^(?:export )?(?:NCCL|CUDA|NVIDIA|NV|TORCH|VLLM|SGLANG|PYTORCH|LD_LIBRARY|PATH|HOME|HOSTNAME|OMP)[A-Z0-9_]*=",
           repeats=True, parser=_P + "host:parse_environ", facts=("env",), sample="capture:cmds/env"),
    Source("collect_env", "python -m torch.utils.collect_env", start=r"^(?:Collecting environment information|PyTorch version: \S)", prompt=r"collect_env",
           prompt_rank=18, holds_log_lines=True, parser=_P + "host:parse_pip_lines", facts=("pip_packages",), sample="evidence/collect-env-tp3d66.txt"),
    Source("check_env", "python -m sglang.check_env", start=r"^Python: \d+\.\d+\.\d+ \(", parser=_P + "host:parse_pip_lines",
           facts=("pip_packages",), sample="evidence/sglang-1148-check-env-a800.txt"),
    Source("apt_history", "/var/log/apt/history.log", start=r"^Start-Date: \d{4}-\d\d-\d\d ", parser="infergap.evidence.signatures:scan_lines",
           sample="evidence/shinecluster-30-nvml-unattended.txt"),
    Source("p2p_bandwidth", "p2pBandwidthLatencyTest (CUDA samples)",
           start=r"^(?:\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]|(?:Unidirectional|Bidirectional) P2P=(?:Enabled|Disabled) Bandwidth|P2P=(?:Enabled|Disabled) Latency)",
           prompt=r"p2pBandwidthLatencyTest", prompt_rank=20, repeats=True, holds_log_lines=True,
           parser=_P + "cuda_samples:parse_p2p_bandwidth", facts=("p2p_bandwidth_runs",), sample="evidence/nccl-814-p2p-slower.txt"),
    Source("nccl_tests", "nccl-tests output (all_reduce_perf …)",
           start=r"^#\s{0,8}(?:nThread \d|Using devices|Rank\s{1,6}\d{1,6} Group|\s{0,80}out-of-place\s|\s{0,8}size\s+count\s+type|\s{0,8}\(B\)\s+\(elements\)|Out of bounds values|Avg bus bandwidth)",
           prompt=r"\b(?:all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf\b", prompt_rank=21,
           repeats=True, holds_log_lines=True, parser=_P + "nccl:parse_nccl_tests", facts=("nccl_tests_runs",),
           sample="evidence/nccltests-232-allreduce-two-nodes.txt"),
    Source("ibstat", "ibstat", _cmd("ibstat", "ibstat"), "cmd:ibstat", start=r"^CA '[\w.\-]{1,64}'$", prompt=r"\bibstat\b", prompt_rank=22,
           repeats=True, parser=_P + "host:parse_ibstat", facts=("ib_ports",), sample="evidence/ucx-9515-ibstat.txt"),
    Source("nvsmi_mig", "nvidia-smi mig -lgi / -lci", start=r"^\|\s{0,4}(?:GPU|Compute) instances:\s{0,80}\|$", prompt=r"nvidia-smi\s{1,8}mig\s{1,8}-l[gc]i\b",
           prompt_rank=2, repeats=True, parser=_P + "nvsmi:parse_mig_instances", facts=("mig_instances",), sample="evidence/draf-933-mig-lgi.txt"),
    Source("ibv_devinfo", "ibv_devinfo", _cmd("ibv_devinfo", "ibv_devinfo", "-v"), "cmd:ibv_devinfo", start=r"^hca_id:\s{1,8}[\w.\-]{1,64}$",
           prompt=r"\bibv_devinfo\b", prompt_rank=22, repeats=True, parser=_P + "host:parse_ibv_devinfo", facts=("ib_ports",),
           sample="evidence/deepep-60-ibv-devinfo.txt"),
    Source("nvbandwidth", "nvbandwidth (NVIDIA's copy-bandwidth tool)",
           start=r"^(?:nvbandwidth Version: \S{1,40}$|(?:Running|Waiving) (?:host|device|all)_[a-z0-9_]{1,80}\.$|memcpy (?:CE|SM) (?:CPU|GPU)\(row\) (?:->|<-|<->) (?:CPU|GPU)\(column\) bandwidth \(GB/s\)$)",
           prompt=r"\bnvbandwidth\b", prompt_rank=22, repeats=True, parser=_P + "nvbandwidth:parse_nvbandwidth", facts=("nvbandwidth_runs",),
           sample="evidence/nvbandwidth-15-4090-h2d.txt"),
    Source("nvc_info", "nvidia-container-cli info (NVIDIA container toolkit; -k -d /dev/tty adds its debug log)", serves="cmd:nvc_info",
           start=r"^(?:-- WARNING, the following logs are for debugging purposes only --$|NVRM version:\s{1,8}\S{1,40}$|"
                 r"[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6}\s{1,12}\d{1,10} (?:nvc\w{0,20}|driver|rpc|utils|jetson_\w{1,20})\.c:\d{1,6}\] )",
           prompt=r"nvidia-container-cli\b", prompt_rank=23, repeats=True, holds_log_lines=True, parser=_P + "nvsmi:parse_container_cli_info",
           facts=("gpus", "driver_version", "cuda_driver_version"), sample="evidence/nvdocker-904-container-cli-info.txt"),
    Source("k8s_pod", "kubectl describe pod (limits, mounts, volumes, events)",
           start=r"^(?:Namespace:\s{2,40}[\w.\-]{1,253}|Controlled By:\s{2,40}\w{3,30}/\S{1,253}|Priority Class Name:\s{2,40}\S{1,253})$",
           prompt=r"kubectl\s{1,8}describe\s{1,8}(?:pods?|po)\b", prompt_rank=23, repeats=True, holds_log_lines=True,
           lead=r"^Name:\s{2,40}[\w.\-]{1,253}$",  # describe.go prints the pod's Name before its Namespace
           reads="text", parser=_P + "k8s_pod:parse_describe_pod", facts=("described_pods",), sample="evidence/k8sdp-430-describe-pod-pending.txt"),
    Source("show_gids", "show_gids (Mellanox OFED: the RoCE GID table)", serves="cmd:show_gids",
           start=r"^DEV\s{1,16}PORT\s{1,16}INDEX\s{1,16}GID\s{1,60}IPv4\s{1,60}VER\s{1,16}DEV$", prompt=r"\bshow_gids\b", prompt_rank=22,
           parser=_P + "host:parse_show_gids", facts=("roce_gids",), sample="evidence/nccl-1573-show-gids-pod.txt"),
    Source("dcgmi_diag", "dcgmi diag -r N (DCGM's diagnostic: per test and GPU, Pass / Fail / Warn)",
           start=r"^(?:Successfully ran diagnostic for group\.$|\|\s{0,4}Diagnostic\s{1,40}\|\s{0,4}Result\s{1,80}\|$|"
                 r"[|+]-{3,8}\s{1,4}(?:Metadata|Deployment|Integration|Hardware|Stress|Custom)\s{1,4}-{1,40}\+-{4,120}[|+]$|"
                 # a row of the table pasted alone: a message, or a test and its result
                 r"\|\s(?:Info|Warning)\s{2,40}\|\s.{1,120}\|$|\|\s\w[\w ./\-]{0,40}?\s{2,40}\|\s(?:Pass|Fail|Warn|Skip)(?: - (?:GPU|All)|\s{2,80}\|$))",
           prompt=r"\bdcgmi\s{1,8}diag\b", prompt_rank=23, repeats=True, holds_log_lines=True,
           parser=_P + "dcgm:parse_dcgmi_diag", facts=("parsed",), sample="evidence/dcgmi-godcgm52-gpu0-memory-fail.txt"),
    Source("docker_inspect", "docker inspect <container> (HostConfig: GPU device requests, runtime, devices, /dev/shm size, IPC mode, limits)",
           start=r'^(?:"Id": "[0-9a-f]{64}",|"HostConfig": \{|"DeviceRequests": (?:\[|null,?))$', prompt=r"\bdocker\s{1,8}(?:container\s{1,8})?inspect\b",
           prompt_rank=23, repeats=True, reads="text", parser=_P + "docker_inspect:parse_docker_inspect", facts=("parsed",),
           sample="evidence/docker-dockwatch29-device-requests.txt"),
    # -- sources without a start marker: commands collected live only, and logs (recognised by their lines) --
    Source("lscpu_json", "lscpu -J", _cmd("lscpu_json", "lscpu", "-J")),
    # the serving process (infergap collect --url, or every known engine listening): probes/process.json
    Source("process", "the serving process (command line, GPU/thread environment, threads, affinity, cgroup, GPU memory)",
           serves="probe:process", parser=_P + "process:parse_process_probe", facts=("serving_processes",)),
    Source("dmidecode", "dmidecode -t bios -t system", _cmd("dmidecode", "dmidecode", "-t", "bios", "-t", "system")),
    Source("systemd_detect_virt", "systemd-detect-virt", _cmd("systemd_detect_virt", "systemd-detect-virt")),
    Source("systemd_detect_virt_c", "systemd-detect-virt -c", _cmd("systemd_detect_virt_c", "systemd-detect-virt", "-c")),
    Source("modules_installed", "ls /lib/modules", _cmd("modules_installed", "ls", "-1", "/lib/modules")),
    Source("boot_ls", "ls /boot", _cmd("boot_ls", "ls", "-1", "/boot")),
    Source("cpupower", "cpupower idle-info", _cmd("cpupower", "cpupower", "idle-info")),
    Source("kernel_log", "the kernel log's GPU, PCIe and IOMMU lines", _cmd("kernel_log", "bash", "-c", KERNEL_LOG, timeout_s=20),
           parser=_P + "dmesg:parse_dmesg", facts=()),
    Source("traceback", "Python traceback", log_rank=100, parser="infergap.evidence.signatures:scan_lines", sample="evidence/deepep-584-partial-p2p.txt"),
    Source("fragment", "lines of a known failure signature (signatures.yaml)", log_rank=101, parser="infergap.evidence.signatures:scan_lines",
           sample="evidence/nccl-304-acs-plx.txt"),
    Source("messages", "lines of known component messages (data/messages: NCCL, CUDA, NVML, engines …)",
           log_rank=102, parser="infergap.messages:match_lines", facts=("message_matches",), sample="messages/unknown-format.log"),
    Source("dmesg", "kernel log (dmesg)", prompt=r"\bdmesg\b|journalctl\s+-k", prompt_rank=19, line_test=_P + "dmesg:is_dmesg_line", log_rank=90,
           parser=_P + "dmesg:parse_dmesg", facts=("kernel_logs",), sample="evidence/dmesg-gpuburn1-xid79.txt"),
    Source("nccl_log", "NCCL log (NCCL_DEBUG=INFO)", line_test=_P + "nccl:is_nccl_line", log_rank=0, interleaves=True,
           parser=_P + "nccl:parse_nccl_log", facts=("nccl_runs", "collective_network"), sample="evidence/nccl-1817-shm-8gpu.log"),
    Source("sglang_log", "SGLang server log", line_test=_P + "engine_log:is_sglang_line", log_rank=10, family="engine",
           parser=_P + "engine_log:parse_engine_log", facts=("engine_logs",), sample="evidence/sglang-26248-kv-full.log"),
    Source("vllm_log", "vLLM server log", line_test=_P + "engine_log:is_vllm_line", log_rank=20, family="engine",
           parser=_P + "engine_log:parse_engine_log", facts=("engine_logs",), sample="evidence/vllm-15036-engine-config.log"),
    Source("ollama_log", "Ollama server log", line_test=_P + "ollama_log:is_ollama_line", log_rank=30, family="engine",
           parser=_P + "ollama_log:parse_ollama_log", facts=("engine_logs",), sample="evidence/ollama-9181-partial-offload.log"),
    Source("trtllm_log", "TensorRT-LLM or Triton server log", line_test=_P + "trtllm_log:is_trtllm_line", log_rank=50, family="engine",
           parser=_P + "trtllm_log:parse_trtllm_log", facts=("engine_logs",), sample="evidence/triton-tutorials150-trtllm-loaded.log"),
    Source("ray_log", "Ray driver or node log", line_test=_P + "ray_log:is_ray_line", log_rank=60,
           parser=_P + "ray_log:parse_ray_log", facts=("ray_logs",), sample="evidence/openinstruct-1067-ray-shm-5g.log"),
    Source("k8s_device_plugin", "NVIDIA Kubernetes device plugin log (kubectl logs)", prompt=r"kubectl\s{1,8}logs\b.{0,200}(?:device-plugin|nvdp)", prompt_rank=23,
           line_test=_P + "k8s_log:is_device_plugin_line", log_rank=70, parser=_P + "k8s_log:parse_device_plugin_log", facts=("device_plugin_logs",), sample="evidence/k8sdp-303-nvml-not-loaded.log"),
    Source("gpu_operator_driver", "GPU Operator driver container log (kubectl logs nvidia-driver-daemonset-…)",
           prompt=r"kubectl\s{1,8}logs\b.{0,200}nvidia-driver", prompt_rank=23, line_test=_P + "gpu_operator_log:is_driver_container_line", log_rank=75,
           parser=_P + "gpu_operator_log:parse_driver_container_log", facts=("parsed",), sample="evidence/gpuop-155-driver-kernel-unresolved.log"),
    Source("llamacpp_log", "llama.cpp llama-server log", line_test=_P + "llamacpp_log:is_llamacpp_line", log_rank=40, family="engine",
           parser=_P + "llamacpp_log:parse_llamacpp_log", facts=("engine_logs",), sample="evidence/llamacpp-12171-offload-all.log"),
)
RECORDS: dict[str, Source] = {s.kind: s for s in SOURCES}
#: The log kinds, in ``log_rank`` order (the order the recogniser tests their lines).
LOG_RECORDS: tuple[Source, ...] = tuple(sorted((s for s in SOURCES if s.log_rank is not None), key=lambda s: s.log_rank or 0))
#: The kinds of inference engines' logs (``family="engine"``): every one serves ``engine_log``.
ENGINE_LOG_KINDS: frozenset[str] = frozenset(s.kind for s in SOURCES if s.family == "engine")

#: The order ``infergap collect`` runs the commands in (the cheap ones first, the kernel log last).
_COLLECT_ORDER = ("uname", "lscpu", "lscpu_json", "numactl", "ulimit", "nvsmi", "nvsmi_q", "nvsmi_qx", "nvsmi_topo", "nvsmi_nvlink",
                  "nvsmi_p2p", "nvsmi_csv", "sysctl_all", "pip_list", "df", "torch", "lspci", "lspci_vvv", "lspci_tree", "dmidecode",
                  "systemd_detect_virt", "systemd_detect_virt_c", "modules_installed", "boot_ls", "nvcc", "cpupower", "ibstat", "ibv_devinfo", "kernel_log")
COMMANDS: dict[str, Command] = {n: RECORDS[n].command for n in _COLLECT_ORDER if RECORDS[n].command is not None}  # type: ignore[misc]

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
