"""Containers and process limits: detection, RLIMIT_MEMLOCK, RLIMIT_NOFILE, /dev/shm.

Sources and thresholds:
- detection: ``systemd-detect-virt -c``, ``container=`` in /proc/1/environ, /.dockerenv,
  lxcfs mounts (systemd's src/basic/virt.c uses the same signals).
- memlock: RDMA registration and large pinned buffers fail with ENOMEM above RLIMIT_MEMLOCK
  (setrlimit(2)); systemd's default is 8 MiB; NVIDIA's and NCCL's container guides use unlimited.
  On a host whose whole PCI list holds no NVIDIA GPU and no RDMA NIC the limit is not applicable.
- nofile: >= 65536; 1024 exhausts under many client connections (EMFILE).
- /dev/shm: Docker's default is 64 MiB; NCCL's SHM transport needs more (NCCL troubleshooting guide:
  ``--shm-size=1g``); vLLM's docs suggest ``--ipc=host``.
"""

from __future__ import annotations

from infergap import checks
from infergap.findings import Finding, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, unknown

NAME = "container"
NOFILE_GOOD = checks.threshold("limits.nofile", "min_open_files")
SHM_GOOD_B = checks.threshold("container.shm", "min_bytes")


def _no_output(ctx: Context, name: str) -> bool:
    """No record of command ``name``, or one that never ran (unreadable, not found)."""
    r = ctx.facts.command(name)
    return r is None or (r.error is not None and r.rc is None)


def _detect(ctx: Context) -> Finding:
    c = ctx.facts.container()
    if c.inside:
        return finding("container.detect", Status.expected, f"Running inside a {c.kind} container", evidence_=evidence(*c.evidence),
                       impact="Kernel settings (sysctls), cpufreq, cpuidle and PCI config space belong to the host: findings about them are marked host-controlled and their commands are for the host.")
    seen = _not_container_evidence(ctx)
    if not seen:
        return unknown("container.detect", "Container: not captured", "Needs /proc/1/environ, /proc/1/cgroup, /proc/mounts or systemd-detect-virt -c.")
    return finding("container.detect", Status.ok, "Not inside a container", evidence_=evidence(*c.evidence, *c.discounted, *seen))


def _not_container_evidence(ctx: Context) -> list[tuple[str, str]]:
    """What was read and showed no container: only sources present in the snapshot are cited."""
    out: list[tuple[str, str]] = []
    for path, what in (("/proc/1/environ", "no container= variable"), ("/proc/1/cgroup", None), ("/proc/mounts", "no lxcfs mount over /proc")):
        text = ctx.facts.excerpt(path)
        if text is not None:
            out.append(("files" + path, what or (text or "empty")))
    for name in ("systemd_detect_virt_c", "systemd_detect_virt"):
        r = ctx.facts.command(name)
        if r is not None and not _no_output(ctx, name) and r.stdout.strip():
            out.append((r.source, r.stdout.strip()))
    return out


#: The lines of each limit's remedy (systemd.exec(5) Limit*, docker run --ulimit, limits.conf(5)),
#: and the LXC one (lxc.container.conf(5) lxc.prlimit): literal text, no value from the host.
_LIMIT_LINES = {
    "memlock": (["systemd service: LimitMEMLOCK=infinity", "docker run --ulimit memlock=-1", "/etc/security/limits.conf: * - memlock unlimited"],
                "LXC (on the host): lxc.prlimit.memlock = unlimited in /etc/pve/lxc/<id>.conf, restart the container"),
    "nofile": (["systemd service: LimitNOFILE=1048576", "docker run --ulimit nofile=1048576", "/etc/security/limits.conf: * - nofile 1048576"],
               "LXC (on the host): lxc.prlimit.nofile = 1048576 in /etc/pve/lxc/<id>.conf, restart the container"),
}


def _limit_remedy(ctx: Context, what: str) -> Remedy:
    c = ctx.facts.container()
    lxc = c.kind == "lxc"
    lines, lxc_line = _LIMIT_LINES[what]
    return Remedy(
        commands=[*lines, lxc_line] if lxc else list(lines),
        persist=["the same line in the service unit / limits.conf / container config is persistent"],
        revert=["remove the line and restart the service"],
        host_controlled=lxc,
        note="Limits apply to processes started after the change: restart the inference server.",
    )


def _human(b: int) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 1024)):
        if b >= div:
            return f"{b / div:.1f} {unit}"
    return f"{b} bytes"


def _memlock(ctx: Context) -> Finding:
    cid = "limits.memlock"
    v = ctx.facts.limits().get("memlock_B")
    if v is None:
        return unknown(cid, "RLIMIT_MEMLOCK: not captured", "Needs /proc/self/limits or ulimit -a.")
    if v.value == "unlimited":
        return finding(cid, Status.ok, "Locked-memory limit is unlimited", evidence_=evidence(v), expected_value="unlimited")
    try:
        b = int(v.value)
    except ValueError:
        return unknown(cid, "RLIMIT_MEMLOCK: unreadable", f"{v.value!r} is not a number.", evidence_=evidence(v))
    rdma = ctx.facts.rdma_devices()
    if not rdma and not ctx.facts.gpus() and ctx.facts.pci_inventory_captured():
        # the whole PCI list was read: no GPU buffers to pin and no RDMA NIC to register memory with
        return finding(cid, Status.not_applicable, f"Locked-memory limit is {_human(b)}; this host has no NVIDIA GPU and no RDMA device",
                       evidence_=evidence(v), expected_value="unlimited where GPUs or RDMA NICs are used",
                       impact="The limit caps pinned host buffers of GPU transfers and RDMA memory registration; the captured PCI device "
                              "list holds neither a GPU nor an RDMA NIC, so nothing here is limited by it.")
    sev = Severity.P1 if rdma or b < 2**30 else Severity.P2
    return finding(cid, Status.actionable, f"Locked-memory limit is {_human(b)}, not unlimited",
                   severity=sev, evidence_=evidence(v, *(rdma[:1])), expected_value="unlimited",
                   impact="Pinned host buffers and RDMA memory registration (NCCL over InfiniBand/RoCE, GPUDirect) are capped by this limit; registrations beyond it fail with ENOMEM or fall back to slower paths.",
                   remedy=_limit_remedy(ctx, "memlock"), references=["setrlimit(2) RLIMIT_MEMLOCK", "NCCL troubleshooting guide: memlock"])


def _nofile(ctx: Context) -> Finding:
    cid = "limits.nofile"
    v = ctx.facts.limits().get("nofile")
    if v is None:
        return unknown(cid, "RLIMIT_NOFILE: not captured", "Needs /proc/self/limits or ulimit -a.")
    n = 10**12 if v.value == "unlimited" else int(v.value) if v.value.isdigit() else None
    if n is None:
        return unknown(cid, "RLIMIT_NOFILE: unreadable", f"{v.value!r} is not a number.", evidence_=evidence(v))
    if n >= NOFILE_GOOD:
        return finding(cid, Status.ok, f"Open-files limit is {v.value}", evidence_=evidence(v), expected_value=f">= {NOFILE_GOOD}")
    return finding(cid, Status.actionable, f"Open-files limit is {n}", evidence_=evidence(v), expected_value=f">= {NOFILE_GOOD}",
                   impact="A server handling many concurrent client connections runs out of descriptors (EMFILE) and drops requests.",
                   remedy=_limit_remedy(ctx, "nofile"), references=["setrlimit(2) RLIMIT_NOFILE"])


def _ray_shm(ctx: Context) -> Finding | None:
    """Ray's object store put on disk because /dev/shm was too small for it (a pasted Ray log), or None.

    Ray falls back to /tmp when ``/dev/shm`` offers less than the object store it sizes (30 % of
    RAM by default; ``determine_plasma_store_config`` in ray's ``python/ray/_private/services.py``),
    and every object then moves through the page cache and the disk."""
    for part, f in ctx.facts.ray_logs():
        if f.object_store_dir is None or f.shm_available_bytes is None:
            continue
        size = f"--shm-size={f.shm_size_hint_gb:g}g" if f.shm_size_hint_gb else "--shm-size larger than Ray's object store (30 % of RAM by default)"
        return finding("container.shm", Status.actionable, f"Ray put its object store on {f.object_store_dir}: /dev/shm had only {_gib(f.shm_available_bytes)}",
                       evidence_=evidence((part.label, f.evidence["object_store"])), expected_value="/dev/shm larger than Ray's object store",
                       impact="Ray's object store (tensors and weights passed between its workers, vLLM's and SGLang's multi-node executors included) lives on disk instead of memory: every transfer pays page-cache and disk copies.",
                       remedy=Remedy(note=f"Start the container with a larger /dev/shm (docker run {size}, or --ipc=host), or give Ray an object store "
                                          "that fits it (ray start --object-store-memory=BYTES, below the /dev/shm size).", host_controlled=ctx.in_container),
                       references=["https://github.com/ray-project/ray/pull/14629", "https://docs.ray.io/en/latest/ray-core/objects.html"])
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _pod_shm(ctx: Context) -> Finding | None:
    """``container.shm`` from a pasted ``kubectl describe pod``: a container with a GPU limit and
    no memory-backed volume (``emptyDir`` with ``Medium: Memory``) mounted at ``/dev/shm`` gets the
    runtime's 64 MiB default (kubernetes/kubernetes#28272) and is actionable; one with such a
    mount is ok (its ``SizeLimit``, or up to the node's memory). None without a GPU container."""
    cid = "container.shm"
    for part, pod in ctx.facts.described_pods():
        for c in (c for c in pod.containers if c.gpus):
            vol = c.mounts.get("/dev/shm")
            spec = pod.volumes.get(vol or "", {})
            where = f"pod {pod.fields.get('Name', '?')}, container {c.name} (nvidia.com/gpu: {c.gpus})"
            if vol is not None and spec.get("Medium") == "Memory":
                size = spec.get("SizeLimit") or "<unset>"
                return finding(cid, Status.ok, f"/dev/shm of {c.name} is a memory-backed volume ({vol}, size limit {size})", subject=part.label,
                               evidence_=evidence((part.label, f"{where}: /dev/shm from {vol}, Medium: Memory, SizeLimit: {size}")), expected_value=">= 1 GiB")
            mounts = ", ".join(sorted(c.mounts)) or "none"
            return finding(cid, Status.actionable, f"Container {c.name} mounts nothing memory-backed at /dev/shm: it gets the runtime's 64 MiB default",
                           subject=part.label, evidence_=evidence((part.label, f"{where}: mounts {mounts}")), expected_value="an emptyDir with medium: Memory at /dev/shm",
                           impact="NCCL's shared-memory transport and engines' IPC buffers live in /dev/shm; 64 MiB makes NCCL fail or fall back with tensor parallelism.",
                           remedy=Remedy(note="Add to the pod spec: volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}] and, in the container, "
                                              "volumeMounts: [{name: dshm, mountPath: /dev/shm}]."),
                           references=["https://github.com/kubernetes/kubernetes/issues/28272"])
    return None


def _shm(ctx: Context) -> Finding:
    cid = "container.shm"
    ray = _ray_shm(ctx)
    if ray is not None:
        return ray
    df = ctx.facts.shm_mounts()
    if df is None:
        pod = _pod_shm(ctx)
        return pod if pod is not None else unknown(cid, "/dev/shm size: not captured", "Needs df -h /dev/shm.")
    e = df.get("/dev/shm")
    if e is None:
        return unknown(cid, "/dev/shm: not mounted or not captured", "df did not list /dev/shm.",
                       evidence_=evidence((ctx.facts.src("df"), ctx.facts.command("df").stdout.strip()[:200])))
    size = e["size_B"]
    ev = evidence((ctx.facts.src("df"), f"/dev/shm {e['fs']} size {e['size']}"))
    if size is not None and size < SHM_GOOD_B:
        return finding(cid, Status.actionable, f"/dev/shm is only {e['size']}", evidence_=ev, expected_value=">= 1 GiB",
                       impact="NCCL's shared-memory transport and engines' IPC buffers live in /dev/shm; Docker's 64 MB default makes NCCL fail or fall back.",
                       remedy=checks.remedy(cid, commands=["docker run --shm-size=16g … (or --ipc=host)", "mount -o remount,size=16G /dev/shm"], revert=[("remount", {"size": e["size"]})], host_controlled=ctx.in_container),
                       references=["NCCL troubleshooting guide: Docker --shm-size", "vLLM docs: --ipc=host"])
    return finding(cid, Status.ok, f"/dev/shm is {e['size']}", evidence_=ev, expected_value=">= 1 GiB")


def _gpu_request(ctx: Context) -> list[Finding]:
    """container.gpu_request of each pasted ``docker inspect``: a container given GPUs (a device
    request with the ``gpu`` capability or the ``nvidia`` driver, the ``nvidia`` runtime, a
    ``/dev/nvidia*`` device, ``NVIDIA_VISIBLE_DEVICES``) is ok; one whose HostConfig shows none
    of them is actionable (started without ``--gpus``: no GPU, no ``nvidia-smi`` inside);
    nothing for a paste without those fields."""
    cid = "container.gpu_request"
    out = []
    for part, containers in ctx.facts.parsed("docker_inspect"):
        for c in containers:
            asks = c.asks_for_gpus
            if asks is None:
                continue
            who = f"container {c.name}" if c.name else "the container"
            reqs = "; ".join(f"DeviceRequests: driver {r.driver or '(default)'}, count {r.count}"
                             + (f", devices {','.join(r.device_ids)}" if r.device_ids else "") + f", capabilities {r.capabilities}" for r in c.requests or [])
            shown = reqs or (f"Runtime: {c.runtime}" if c.runtime else "") or f"Devices: {', '.join(c.devices or []) or 'none'}"
            ev = evidence((part.label, shown))
            if asks:
                out.append(finding(cid, Status.ok, f"docker inspect: {who} is given GPUs", subject=part.label, evidence_=ev,
                                   expected_value="a GPU device request (--gpus), the nvidia runtime or /dev/nvidia* devices"))
                continue
            out.append(finding(cid, Status.actionable, f"docker inspect: {who} is given no GPU", subject=part.label, evidence_=ev,
                               expected_value="a GPU device request (--gpus), the nvidia runtime or /dev/nvidia* devices",
                               impact="Without a GPU request the NVIDIA container runtime injects no device and no driver library: the server inside "
                                      "finds no GPU (nvidia-smi not found, torch.cuda.is_available() False) and runs on the CPU or fails.",
                               remedy=Remedy(commands=["docker run --gpus all …   (or --gpus '\"device=0,1\"')",
                                                       "compose: deploy.resources.reservations.devices: [{driver: nvidia, count: all, capabilities: [gpu]}]"],
                                             note="Recreate the container: a device request cannot be added to a running one."),
                               references=["https://docs.docker.com/engine/containers/resource_constraints/#gpu",
                                           "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html"]))
    return out


def investigate(ctx: Context) -> list[Finding]:
    """container.detect, limits.memlock, limits.nofile, container.shm, container.gpu_request (a
    pasted docker inspect)."""
    return [_detect(ctx), _memlock(ctx), _nofile(ctx), _shm(ctx), *_gpu_request(ctx)]
