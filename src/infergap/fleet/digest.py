"""One node's audit, reduced to what fleet drift needs: a :class:`NodeDigest`.

A digest is small (a few KB: one short value per check, a dozen versions and measurements), so
the driver can hold one per node for thousands of nodes while the full audit report is recorded
in the ledger and dropped.

What is compared between nodes:

- **checks**: every finding of the single-host audit, keyed by check id and subject, with its
  status, severity and evidence values. GPU subjects (PCI addresses) become ``GPU<i>`` in BDF
  order, so identical machines whose GPUs sit at other addresses still line up. Values that change
  from one minute to the next on a healthy node (temperatures, clocks, power draw, throttle
  reasons while idle) are compared by status only (:data:`STATUS_ONLY`); so are checks whose value
  is a version or a measurement already compared below.
- **versions**: kernel, NVIDIA driver, CUDA, torch, NCCL and the serving engines (pip).
- **measurements**: host memory and, with ``--active``, copy, memory and all-reduce bandwidths;
  compared with the class median under a tolerance (see :mod:`infergap.fleet.drift`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from infergap.audit import run_audit
from infergap.facts import Facts
from infergap.investigators.bandwidth import MEASURED_GBPS, MEMORY_BANDWIDTH
from infergap.snapshot.core import Snapshot

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.synthesis import AuditReport

#: Checks compared by status and severity only: their evidence holds readings that differ between
#: healthy peers (temperature, clocks, power draw, idle throttle reasons), or a version or
#: measurement that :func:`versions` / :func:`measurements` compare on their own.
STATUS_ONLY = frozenset({
    "gpu.clocks", "gpu.thermals", "gpu.throttle", "mem.host", "kernel.pending_reboot", "kernel.version",
    "driver.cuda_compat", "runtime.stack", "runtime.versions", "gpu.memory_bandwidth", "pcie.h2d_bandwidth",
    "nccl.allreduce_bandwidth",
    # Its evidence lists whichever markers the capture could read (/.dockerenv, cgroup, lxcfs);
    # the verdict, container or not, is the status.
    "container.detect",
})

#: Tokens of a kernel command line that iommu.mode judges (the rest is kernel.cmdline's to compare).
_IOMMU_TOKEN = re.compile(r"(?<!\S)[\w.]*iommu[\w.]*=\S*")

#: Kernel command-line tokens that name a disk or an image, not a setting.
_CMDLINE_IDENTITY = re.compile(r"\b(?:root|BOOT_IMAGE|initrd|resume|cryptdevice|rd\.luks\.uuid|ip)=\S*\s*")

#: pip distributions whose version is compared (serving engines and the GPU stack under them).
VERSION_PACKAGES = ("vllm", "sglang", "tensorrt-llm", "tensorrt_llm", "llama-cpp-python", "transformers", "flashinfer-python",
                    "triton", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "xformers")

_BDF = re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")


@dataclass
class NodeIdentity:
    """How the fleet knows a node: display ``name``, Ray ``node_id`` (empty for snapshot files),
    ``address`` (IP or the snapshot's path)."""

    name: str
    node_id: str = ""
    address: str = ""

    @property
    def fingerprint(self) -> str:
        """12 hex digits identifying the node in the ledger (stable across fleet runs)."""
        return hashlib.sha256(f"fleet-node:{self.name}".encode()).hexdigest()[:12]


@dataclass
class CheckState:
    """One check on one node: status, severity (actionable only), the compared value, the title
    and, when actionable, the remedy from the single-host finding."""

    check: str
    subject: str
    status: str
    severity: str | None
    value: str
    title: str
    remedy: dict[str, Any] | None = None
    shown: str = ""

    def compared(self) -> str:
        """What must match across a class: status, severity and value."""
        return f"{self.status}{(' ' + self.severity) if self.severity else ''}" + (f": {self.value}" if self.value else "")

    def display(self) -> str:
        """:meth:`compared` as a person reads it: the value as the node reported it (``shown``),
        without the ``<version>`` placeholders that make values comparable."""
        v = self.shown or self.value
        return f"{self.status}{(' ' + self.severity) if self.severity else ''}" + (f": {v}" if v else "")


@dataclass
class NodeDigest:
    """One node's audit as the fleet sees it (see the module docstring). ``state`` is ``audited``
    or, for a node that could not be audited, ``dead``, ``hung``, ``no_infergap`` or ``error``
    with ``error`` saying why (then the other fields are empty)."""

    node: NodeIdentity
    state: str = "audited"
    error: str | None = None
    hw: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    checks: dict[str, CheckState] = field(default_factory=dict)
    measures: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    audit_duration_s: float = 0.0
    ledger_run: int | None = None

    @property
    def class_key(self) -> str:
        """The hardware class: GPU model × count × CPU model × GPU topology fingerprint."""
        h = self.hw
        return f"{h.get('gpu_count', 0)} × {h.get('gpu_model') or 'no GPU'} · {h.get('cpu') or 'unknown CPU'} · topology {h.get('topology') or 'not captured'}"

    def intern(self) -> "NodeDigest":
        """Share the strings that repeat from node to node (check ids, titles, values) with the
        other digests of this process: a digest unpickled from an audit process otherwise holds
        its own copy of each. Returns self."""
        si = sys.intern
        self.checks = {si(k): CheckState(si(c.check), si(c.subject), si(c.status), c.severity and si(c.severity), si(c.value),
                                         si(c.title), c.remedy, si(c.shown)) for k, c in self.checks.items()}
        self.versions = {si(k): si(v) for k, v in self.versions.items()}
        self.measures = {si(k): v for k, v in self.measures.items()}
        return self

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (checks as a list)."""
        d = asdict(self)
        d["checks"] = [asdict(c) for c in self.checks.values()]
        d["class"] = self.class_key if self.state == "audited" else None
        return d


def gpu_subjects(facts: Facts) -> dict[str, str]:
    """PCI address of each GPU -> ``GPU<i>`` (BDF order, as nvidia-smi numbers them by default)."""
    return {g.bdf: f"GPU{i}" for i, g in enumerate(facts.gpus())}


def topology_fingerprint(facts: Facts) -> str | None:
    """6 hex digits over the GPU-to-GPU link matrix of ``nvidia-smi topo -m`` (NV18, PIX, SYS …),
    or ``"1 GPU"`` / None (not captured). NICs and CPU affinity are left out: they differ with
    cabling that does not change what a GPU job sees between its GPUs."""
    topo = facts.topology()
    if topo is None:
        return None
    gpus = topo.gpus
    if len(gpus) < 2:
        return "1 GPU"
    cells = [topo.matrix.get((a, b), "?") for a in gpus for b in gpus if a != b]
    return hashlib.sha256(" ".join(cells).encode()).hexdigest()[:6]


def hardware(facts: Facts) -> dict[str, Any]:
    """The hardware-class fields of a node: GPU model and count, CPU model, topology fingerprint."""
    gpus = facts.gpus()
    names = sorted({g.name or "unknown device" for g in gpus})
    _vendor, cpu, _fam = facts.cpu_vendor_model()
    return {"gpu_model": " + ".join(names) if names else None, "gpu_count": len(gpus), "cpu": cpu,
            "topology": topology_fingerprint(facts)}


def versions(facts: Facts) -> dict[str, str]:
    """Versions that must match across a class: kernel, driver, CUDA (driver and torch's build),
    torch, NCCL (torch's) and the pip packages of :data:`VERSION_PACKAGES` that are installed."""
    out: dict[str, str] = {}
    for key, v in (("kernel", facts.kernel_release()), ("driver", facts.driver_version()), ("cuda_driver", facts.cuda_driver_version())):
        if v is not None:
            out[key] = v.value
    t = facts.torch_info()
    if t:
        for key in ("torch", "cuda", "nccl"):
            if t.get(key):
                out[{"cuda": "cuda_runtime"}.get(key, key)] = str(t[key])
    pk = facts.pip_packages()
    if pk:
        pkgs = {k.lower(): v for k, v in pk[0].items()}
        for name in VERSION_PACKAGES:
            if name in pkgs:
                out[f"pip {name}"] = pkgs[name]
        if "torch" not in out and "torch" in pkgs:
            out["torch"] = pkgs["torch"]
    return out


def _first_number(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def measurements(report: AuditReport, subjects: dict[str, str]) -> dict[str, float]:
    """Numbers compared with the class median: host memory (GiB) and, when measured, device
    memory copy (GB/s), pinned host-to-device copy (GB/s) and the NCCL all-reduce bus bandwidth at
    the largest size (GB/s). Keys name the GPU (``GPU0``) where per GPU."""
    out: dict[str, float] = {}
    for f in report.findings:
        subj = subjects.get(f.subject or "", f.subject or "")
        text = " ".join(e.value for e in f.evidence)
        if f.id == "mem.host":
            kb = _first_number(r"MemTotal (\d+) kB", text)
            if kb:
                out["host memory GiB"] = round(kb / 2**20, 2)
        elif f.id == MEMORY_BANDWIDTH and isinstance(f.details.get(MEASURED_GBPS), (int, float)):
            out[f"{subj} memory copy GB/s"] = round(float(f.details[MEASURED_GBPS]), 1)
        elif f.id == "pcie.h2d_bandwidth":
            v = _first_number(r"H2D pinned ([\d.]+) GB/s", text)
            if v is not None:
                out[f"{subj} H2D pinned GB/s"] = v
        elif f.id == "nccl.allreduce_bandwidth":
            sizes = [s for s in f.details.get("sizes") or [] if isinstance(s, dict) and isinstance(s.get("busbw_GBps"), (int, float))]
            if sizes:
                out["NCCL all-reduce busbw GB/s"] = round(float(max(sizes, key=lambda s: s.get("bytes", 0))["busbw_GBps"]), 1)
    return out


def _normalize(check: str, values: list[str], subjects: dict[str, str], embedded: list[tuple[str, str]] | tuple[()] = ()) -> str:
    if check in STATUS_ONLY:
        return ""
    text = " | ".join(values)
    for v, k in embedded:
        text = text.replace(v, f"<{k}>")
    if check == "kernel.cmdline":
        text = _CMDLINE_IDENTITY.sub("", text).strip()
    if check == "iommu.mode":
        text = " ".join(_IOMMU_TOKEN.findall(text))
    if check == "gpu.power_limit":
        text = re.sub(r",?\s{0,8}draw [\d.]{1,16}\s{0,4}W?", "", text)
    return _BDF.sub(lambda m: subjects.get(m.group(0).lower(), m.group(0)), text)


def digest(snap: Snapshot, node: NodeIdentity) -> tuple[NodeDigest, dict[str, Any]]:
    """Audit ``snap`` (one at a time, as snapshots are) and reduce it: returns the digest and the
    full ``infergap.audit/1`` JSON (for the ledger). Never raises for bad evidence: the audit
    reports it as findings like any other."""
    facts = Facts(snap)
    report = run_audit(snap, parallel=False, facts=facts)
    subjects = gpu_subjects(facts)
    vers = versions(facts)
    # Values that embed a version compared on its own ("… on 6.8.12-4-pve") would drift twice.
    embedded = sorted(((v, k) for k, v in vers.items() if len(v) >= 4), key=lambda kv: -len(kv[0]))
    checks: dict[str, CheckState] = {}
    for f in report.findings:
        subj = subjects.get(f.subject or "", f.subject or "")
        key = f"{f.id}@{subj}" if subj else f.id
        act = f.status.value == "actionable"
        checks[key] = CheckState(
            check=f.id, subject=subj, status=f.status.value, severity=f.severity.value if f.severity else None,
            value=_normalize(f.id, [e.value for e in f.evidence], subjects, embedded), title=f.title,
            shown=_normalize(f.id, [e.value for e in f.evidence], subjects),
            remedy=(f.remedy.model_dump(mode="json", exclude_defaults=True) if act and f.remedy else None))
    sev = report.summary.get("actionable_by_severity") or {}
    counts = {**{k: int(v) for k, v in sev.items()}, "unknown": report.summary["counts"].get("unknown", 0),
              "actionable": report.summary["counts"].get("actionable", 0)}
    host = {k: v for k, v in report.host.as_dict().items() if k != "snapshot"}
    d = NodeDigest(node=node, hw=hardware(facts), host=host, versions=vers, checks=checks,
                   measures=measurements(report, subjects), counts=counts,
                   audit_duration_s=round(float(report.summary.get("duration_s") or 0.0), 4))
    return d, report.to_json()
