"""Getting every node's snapshot and auditing them all: from snapshot files, or from a Ray cluster.

Both sources feed one stream of ``(NodeIdentity, payload)`` where the payload is a snapshot path,
the ``.tar.gz`` bytes a node returned, or a :class:`NodeDigest` already saying why the node could
not be audited. :func:`audit_stream` audits the stream in a process pool with a bounded number of
snapshots in flight (``4 × workers``), so the driver's memory does not grow with the fleet: each
snapshot is dropped once audited and only its digest (a few KB) is kept.
"""

from __future__ import annotations

import glob
import logging
import multiprocessing
import os
import socket
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

from infergap.errors import UserError
from infergap.fleet import node_task
from infergap.fleet.digest import NodeDigest, NodeIdentity, digest
from infergap.snapshot import SnapshotError, open_snapshot
from infergap.snapshot.memory import MemorySnapshot

log = logging.getLogger(__name__)

Payload = Union[str, bytes, NodeDigest]
#: Called with each audited node's digest and full audit JSON; returns the ledger run id or None.
Recorder = Callable[[NodeDigest, dict[str, Any]], Union[int, None]]

#: One line telling how to get the optional Ray dependency.
RAY_INSTALL_HINT = "Ray is not installed: pip install 'infergap[fleet]' (or pip install 'ray>=2.9')"

#: Seconds a node may take to collect before it is reported as hung. ``infergap collect`` bounds
#: each command (the slowest, the torch probe, at 90 s); a node that exceeds this is stuck.
DEFAULT_NODE_TIMEOUT_S = 180.0


# -- snapshot files -----------------------------------------------------------------------------

def _is_snapshot(p: Path) -> bool:
    if p.is_file():
        return p.name.endswith((".tar.gz", ".tgz", ".tar"))
    return p.is_dir() and ((p / "meta.json").exists() or (p / "files").is_dir() or (p / "cmds").is_dir())


def expand_snapshots(spec: str) -> list[Path]:
    """Snapshot paths named by ``spec``: a directory of snapshots (``.tar.gz``/``.tgz``/``.tar``
    files or snapshot directories), a single snapshot, or a glob pattern. Sorted. Raises
    :class:`UserError` (one line) when nothing matches."""
    p = Path(spec)
    if p.is_dir() and not _is_snapshot(p):
        found = sorted(c for c in p.iterdir() if _is_snapshot(c))
        if not found:
            raise UserError(f"--snapshots {spec}: no snapshots in this directory (.tar.gz files or snapshot directories)")
        return found
    if p.exists():
        return [p]
    found = sorted(Path(x) for x in glob.glob(spec) if _is_snapshot(Path(x)))
    if not found:
        raise UserError(f"--snapshots {spec}: no snapshot matches")
    return found


def node_name(path: Path) -> str:
    """Display name of a node from its snapshot path (the file name without ``.tar.gz``)."""
    name = path.name
    for suf in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _suffix(p: Path, k: int, full: bool) -> str:
    parts = p.parent.parts[1:] if p.is_absolute() else p.parent.parts
    return "/".join([*parts[len(parts) - k:], p.name if full else node_name(p)]) if k else (p.name if full else node_name(p))


def node_names(paths: list[Path]) -> list[str]:
    """A unique display name per snapshot path: the name without ``.tar.gz`` where no other
    node has it, else the shortest distinguishing part of the path — as many parent directories
    as tell it apart (``a/snap``, ``x/a/snap``), then the file name with its suffix (``a`` and
    ``a.tgz``). A name depends only on the nodes it collides with, never on their order, so two
    fleet runs over the same snapshots (or with nodes added elsewhere) name each node alike and
    ``compare`` reports no change that is only a renaming."""
    paths = [Path(os.path.abspath(p)) for p in paths]
    out = []
    for p in paths:
        group = [q for q in paths if q != p and node_name(q) == node_name(p)]
        name = None
        for full in (False, True):
            for k in range(len(p.parent.parts)):
                cand = _suffix(p, k, full)
                if all(_suffix(q, k, full) != cand for q in group):
                    name = cand
                    break
            if name is not None:
                break
        out.append(name or str(p))
    return out


def snapshot_stream(paths: Iterable[Path]) -> Iterator[tuple[NodeIdentity, Payload]]:
    """``(identity, path)`` per snapshot (a path given twice is audited once), named by
    :func:`node_names`."""
    unique = list(dict.fromkeys(Path(os.path.abspath(p)) for p in paths))
    for p, name in zip(unique, node_names(unique)):
        yield NodeIdentity(name=name, address=str(p)), str(p)


# -- auditing -----------------------------------------------------------------------------------

def audit_one(identity: NodeIdentity, payload: Payload, want_audit: bool = True) -> tuple[NodeDigest, dict[str, Any] | None]:
    """Audit one node's snapshot (a path or ``.tar.gz`` bytes). A snapshot that cannot be read
    becomes a digest of state ``error`` with the one-line reason; never raises."""
    if isinstance(payload, NodeDigest):
        return payload, None

    try:
        if isinstance(payload, bytes):
            snap = MemorySnapshot.from_archive(payload, identity.name)
        elif payload.endswith((".tar.gz", ".tgz", ".tar")) and os.path.isfile(payload):
            snap = MemorySnapshot.from_archive_file(payload)
        else:
            snap = open_snapshot(payload)
    except (SnapshotError, OSError, MemoryError) as e:
        return NodeDigest(node=identity, state="error", error=str(e).splitlines()[0] if str(e) else type(e).__name__), None
    try:
        d, audit = digest(snap, identity)
    except Exception as e:  # an audit bug on one node must not stop the fleet
        log.debug("audit of %s failed", identity.name, exc_info=True)
        return NodeDigest(node=identity, state="error", error=f"audit failed: {type(e).__name__}: {e}".splitlines()[0]), None
    finally:
        snap.close()
    return d, (audit if want_audit else None)


def _audit_task(identity: NodeIdentity, payload: Payload, want_audit: bool) -> tuple[NodeDigest, dict[str, Any] | None]:
    return audit_one(identity, payload, want_audit)


def default_workers() -> int:
    """Processes that audit snapshots: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def audit_stream(items: Iterable[tuple[NodeIdentity, Payload]], *, workers: int | None = None,
                 recorder: Recorder | None = None, progress: Callable[[NodeDigest], None] | None = None) -> list[NodeDigest]:
    """Audit every item and return the digests (in completion order).

    ``workers``: processes (default :func:`default_workers`; 0 audits in this process, which is
    what a handful of nodes wants). At most ``4 × workers`` snapshots are in flight; a full audit
    JSON crosses back only when ``recorder`` is given, which is then called with it and may return
    the ledger run id kept in the digest.
    """
    workers = default_workers() if workers is None else workers
    out: list[NodeDigest] = []

    def done(d: NodeDigest, audit: dict[str, Any] | None) -> None:
        d.intern()
        if recorder is not None and audit is not None:
            d.ledger_run = recorder(d, audit)
        out.append(d)
        if progress is not None:
            progress(d)

    if workers <= 0:
        for ident, payload in items:
            done(*audit_one(ident, payload, recorder is not None))
        return out
    # spawn: the driver may hold Ray's threads and sockets, which a forked child must not inherit.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        inflight: set[Future[Any]] = set()
        limit = 4 * workers
        for ident, payload in items:
            if isinstance(payload, NodeDigest):
                done(payload, None)
                continue
            inflight.add(pool.submit(_audit_task, ident, payload, recorder is not None))
            while len(inflight) >= limit:
                finished, inflight = wait(inflight, return_when=FIRST_COMPLETED)
                for f in finished:
                    done(*f.result())
        while inflight:
            finished, inflight = wait(inflight, return_when=FIRST_COMPLETED)
            for f in finished:
                done(*f.result())
    return out


# -- Ray ----------------------------------------------------------------------------------------

def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(RAY_INSTALL_HINT) from None
    return ray


def _classify(e: BaseException) -> tuple[str, str]:
    """(state, one-line reason) of a node task that raised."""
    import ray.exceptions as rx

    text = str(e).strip().splitlines()
    first = next((ln for ln in text if ln.strip()), type(e).__name__)
    if isinstance(e, (rx.NodeDiedError, rx.LocalRayletDiedError)):
        return "dead", f"the node died while collecting ({type(e).__name__})"
    if isinstance(e, (rx.WorkerCrashedError, rx.OwnerDiedError, rx.ObjectLostError)):
        return "dead", f"the task's worker died while collecting ({type(e).__name__}); the node may be gone"
    if isinstance(e, rx.TaskUnschedulableError):
        return "dead", "the task could not be placed on the node (it left the cluster)"
    if isinstance(e, rx.TaskCancelledError):
        return "hung", "cancelled after the per-node timeout"
    if isinstance(e, rx.RuntimeEnvSetupError):
        return "error", f"the runtime environment could not be set up on the node: {first[:300]}"
    if "No module named 'infergap" in str(e):
        return "no_infergap", "infergap is not importable on the node (install it in the image or pass runtime_env={'pip': ['infergap']})"
    return "error", f"{type(e).__name__}: {first[:300]}"


#: Seconds to wait for a TCP answer from the cluster's address before calling it unreachable
#: (ray.init itself keeps retrying an address where nothing listens for many minutes).
CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str) -> None:
    """Raise :class:`UserError` when nothing accepts a TCP connection at the Ray address that
    ``address`` names (``auto`` reads ``RAY_ADDRESS``; ``auto`` without it, and ``local``, are left
    to Ray, which finds a cluster on this machine or says there is none)."""
    addr = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    if not addr or addr in ("auto", "local"):
        return
    hostport = addr.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--address {address}: expected host:port or ray://host:port, got {addr!r}")
    where = address if address != "auto" else f"auto (RAY_ADDRESS={addr})"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise UserError(f"--address {where}: nothing answers at {host}:{port} ({e.strerror or type(e).__name__})") from None


def ray_stream(address: str, *, active: bool = False, timeout_s: float = DEFAULT_NODE_TIMEOUT_S,
               runtime_env: dict[str, Any] | None = None, on_nodes: Callable[[int], None] | None = None) -> Iterator[tuple[NodeIdentity, Payload]]:
    """Collect every alive node of the Ray cluster at ``address`` (``auto``: ``RAY_ADDRESS``, else
    a cluster started on this machine) and yield ``(identity, .tar.gz bytes)`` as nodes answer,
    then a failure digest for each node that died, hung past ``timeout_s`` (its task is
    cancelled) or lacks infergap.

    One task per node, pinned with ``NodeAffinitySchedulingStrategy(node_id, soft=False)`` and no
    retries. A passive collect asks for no CPU (it reads files and runs short commands), so it
    reaches a node whose CPUs are busy; ``active`` asks for all of the node's GPUs, so the
    measurements wait for the user's GPU jobs instead of running beside them. ``runtime_env`` is
    passed to ``ray.init`` unchanged (the user's choice; infergap installs nothing).

    Raises :class:`UserError` when Ray is missing or the cluster cannot be reached.
    """
    ray = _ray()
    check_reachable(address)
    _ray_init(ray, address, runtime_env)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        ids = _identities(nodes)
        if on_nodes is not None:
            on_nodes(len(ids))
        pending, asked = _submit(ray, ids, nodes, active)
        deadline = time.monotonic() + timeout_s
        while pending:
            # Every answer that is ready within a second; past the deadline, only those already
            # there (a slow consumer must not turn answered nodes into hung ones).
            left = deadline - time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=max(0.0, min(left, 1.0)))
            if not ready and left <= 0:
                break
            for ref in ready:
                ident = pending.pop(ref)
                yield ident, _answer(ray, ref, ident)
        for ref, ident in pending.items():
            try:
                ray.cancel(ref, force=True)
            except Exception:  # cancelling is best effort; the node is reported either way
                log.debug("cancel of %s failed", ident.name, exc_info=True)
            extra = f" (with --active it waits for all {asked[ident.name]:g} GPUs of the node)" if asked.get(ident.name) else ""
            yield ident, NodeDigest(node=ident, state="hung", error=f"no answer within the per-node timeout of {timeout_s:g} s{extra}")
    finally:
        ray.shutdown()


def _ray_init(ray: Any, address: str, runtime_env: dict[str, Any] | None) -> None:
    """Connect to the cluster quietly (no dashboard, no worker logs). Raises :class:`UserError`
    with one line when it cannot."""
    init: dict[str, Any] = {"address": address, "logging_level": logging.WARNING, "log_to_driver": False,
                            "include_dashboard": False}
    if runtime_env:
        init["runtime_env"] = runtime_env
    try:
        ray.init(**init)
    except Exception as e:  # ConnectionError, TimeoutError, RaySystemError …: one line either way
        where = address if address != "auto" else f"auto (RAY_ADDRESS={os.environ.get('RAY_ADDRESS') or 'unset'})"
        raise UserError(f"--address {where}: cannot connect to a Ray cluster ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def _identities(nodes: list[dict[str, Any]]) -> list[NodeIdentity]:
    """Each node's identity: its host name (suffixed with its node id where two share one)."""
    names = [str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or n["NodeID"][:12]) for n in nodes]
    return [NodeIdentity(name=(f"{nm}:{n['NodeID'][:8]}" if names.count(nm) > 1 else nm), node_id=n["NodeID"],
                         address=str(n.get("NodeManagerAddress") or "")) for nm, n in zip(names, nodes)]


def _submit(ray: Any, ids: list[NodeIdentity], nodes: list[dict[str, Any]],
            active: bool) -> tuple[dict[Any, NodeIdentity], dict[str, float]]:
    """One collect task per node, pinned to it: (object ref → node, GPUs asked per node name)."""
    from ray import cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


    cloudpickle.register_pickle_by_value(node_task)
    try:
        fn = ray.remote(node_task.collect_here)
    finally:
        cloudpickle.unregister_pickle_by_value(node_task)
    pending: dict[Any, NodeIdentity] = {}
    asked: dict[str, float] = {}
    for ident, n in zip(ids, nodes):
        gpus = float((n.get("Resources") or {}).get("GPU", 0)) if active else 0
        asked[ident.name] = gpus
        opts: dict[str, Any] = {"num_cpus": 0, "max_retries": 0,
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)}
        if gpus:
            opts["num_gpus"] = gpus
        pending[fn.options(**opts).remote(active)] = ident
    return pending, asked


def _answer(ray: Any, ref: Any, ident: NodeIdentity) -> Payload:
    """A finished node task's snapshot bytes, or the digest of its failure (Ray's error, a
    node without infergap, no snapshot returned)."""
    try:
        res = ray.get(ref)
    except Exception as e:  # Ray's errors: node died, worker crashed, unschedulable …
        state, why = _classify(e)
        return NodeDigest(node=ident, state=state, error=why)
    if not isinstance(res, dict) or res.get("state") != "ok" or not isinstance(res.get("snapshot"), bytes):
        state = res.get("state") if isinstance(res, dict) and res.get("state") in ("no_infergap", "error") else "error"
        why = (res.get("error") if isinstance(res, dict) else None) or "the node returned no snapshot"
        return NodeDigest(node=ident, state=state, error=why)
    return res["snapshot"]
