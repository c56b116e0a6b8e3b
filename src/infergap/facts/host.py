"""Kernel and process facts: sysctls, loaded modules, the kernel command line and release,
installed kernels, process limits, the Python packages and environment of the serving process.

Sources, most direct first: ``/proc`` and ``/proc/sys`` files, then command output (``sysctl -a``,
``uname -a``, ``ulimit -a``, ``pip list``, ``env``); parsing is :mod:`infergap.parsers.host`.
"""

from __future__ import annotations

import re
from typing import Any

from infergap.facts.base import FactsBase, Value, memo
from infergap.parsers import host as hp
from infergap.parsers.dmesg import parse_dmesg
from infergap.parsers.engine_args import ParsedArgs, parse_argv
from infergap.parsers.process import ProcessEvidence, parse_process_probe


class HostDomain(FactsBase):
    """Kernel and process accessors of :class:`infergap.facts.Facts`."""

    @memo
    def serving_processes(self) -> list[tuple[ProcessEvidence, ParsedArgs | None]]:
        """The serving processes the snapshot kept (``probes/process.json``), each as
        (:class:`~infergap.parsers.process.ProcessEvidence`, scrubbed; its command line parsed
        with the engine's argument table, :class:`~infergap.parsers.engine_args.ParsedArgs`, or
        None for an engine without one); empty when absent."""
        procs, note = parse_process_probe(self.snap.probe("process"))
        if note and "malformed" in note:
            self.problems["probes/process.json"] = note
        return [(p, parse_argv(p.argv, p.env)) for p in procs]

    @memo
    def sysctl_all(self) -> dict[str, str]:
        """``sysctl -a`` output, parsed (empty when absent)."""
        r = self.cmd_ok("sysctl_all")
        return hp.parse_sysctl_all(r.stdout) if r else {}

    def sysctl(self, key: str) -> Value | None:
        """A sysctl from ``/proc/sys/<key with / for .>``, else from ``sysctl -a``; whitespace
        inside the value as single tabs (as /proc/sys prints it)."""
        path = "/proc/sys/" + key.replace(".", "/")
        v = self.value(path)
        if v is not None:
            return Value(re.sub(r"\s+", "\t", v.value), v.source)
        s = self.sysctl_all().get(key)
        return Value(re.sub(r"\s+", "\t", s), self.src("sysctl_all")) if s is not None else None

    @memo
    def modules(self) -> set[str] | None:
        """Loaded kernel modules from /proc/modules (None when not captured)."""
        t = self.snap.read("/proc/modules")
        return hp.parse_modules(t) if t is not None else None

    @memo
    def cmdline(self) -> Value | None:
        """The kernel command line."""
        return self.value("/proc/cmdline")

    @memo
    def kernel_release(self) -> Value | None:
        """Running kernel release: /proc/sys/kernel/osrelease, ``uname -a``, /proc/version."""
        v = self.value("/proc/sys/kernel/osrelease")
        if v:
            return v
        r = self.cmd_ok("uname")
        release = hp.parse_uname(r.stdout) if r else None
        if release:
            return Value(release, self.src("uname"))
        pv = self.value("/proc/version")
        if pv:
            m = re.match(r"Linux version (\S+)", pv.value)
            if m:
                return Value(m.group(1), pv.source)
        return None

    @memo
    def installed_kernels(self) -> tuple[list[str], str] | None:
        """Kernel releases installed (``/lib/modules`` listing, else ``/boot``), with the source."""
        for name in ("modules_installed", "boot_ls"):
            r = self.cmd_ok(name)
            if r:
                rels = hp.kernel_releases_from_listing(r.stdout)
                if rels:
                    return rels, self.src(name)
        return None

    @memo
    def limits(self) -> dict[str, Value]:
        """Process limits: ``memlock_B`` / ``nofile`` (soft) as text (``unlimited`` or a number),
        from /proc/self/limits, else ``ulimit -a`` (memlock converted from KiB)."""
        out: dict[str, Value] = {}
        t = self.snap.read("/proc/self/limits")
        if t:
            lim = hp.parse_limits(t)
            if "Max locked memory" in lim:
                out["memlock_B"] = Value(lim["Max locked memory"][0], "files/proc/self/limits")
            if "Max open files" in lim:
                out["nofile"] = Value(lim["Max open files"][0], "files/proc/self/limits")
        r = self.cmd_ok("ulimit")
        if r:
            u = hp.parse_ulimit(r.stdout)
            if "memlock_B" not in out and "-l" in u:
                v = u["-l"]
                out["memlock_B"] = Value(v if v == "unlimited" else str(int(v) * 1024) if v.isdigit() else v, self.src("ulimit"))
            if "nofile" not in out and "-n" in u:
                out["nofile"] = Value(u["-n"], self.src("ulimit"))
        return out

    @memo
    def pip_packages(self) -> tuple[dict[str, str], str] | None:
        """Python packages of the serving environment (``pip list``), with the source."""
        r = self.cmd_ok("pip_list")
        if not r:
            return None
        pk = hp.parse_pip_list(r.stdout)
        return (pk, self.src("pip_list")) if pk else None

    @memo
    def env(self) -> dict[str, str] | None:
        """GPU/CUDA/NCCL environment variables captured in ``cmds/env.out``."""
        r = self.cmd_ok("env")
        if r is None:
            return None
        out = {}
        for line in r.stdout.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v
        return out

    @memo
    def meminfo(self) -> dict[str, int] | None:
        """``/proc/meminfo`` fields in bytes (:func:`~infergap.parsers.host.parse_meminfo`), or None when not captured (or empty)."""
        t = self.snap.read("/proc/meminfo")
        return hp.parse_meminfo(t) if t else None

    @memo
    def swaps(self) -> list[dict[str, str]] | None:
        """The swap devices of ``/proc/swaps`` (:func:`~infergap.parsers.host.parse_swaps`), or None when not captured (or empty)."""
        t = self.snap.read("/proc/swaps")
        return hp.parse_swaps(t) if t else None

    @memo
    def kernel_log_facts(self) -> Any:
        """The host's own kernel log lines (``cmds/kernel_log``) parsed
        (:func:`~infergap.parsers.dmesg.parse_dmesg`), or None when the command did not run or failed."""
        r = self.snap.cmd("kernel_log")
        return parse_dmesg(r.stdout.splitlines()) if r is not None and r.ok else None

    @memo
    def kernel_log(self) -> Any:
        """The host's own kernel log lines (``cmds/kernel_log``: its GPU, PCIe and IOMMU lines),
        as the command record (ran, failed, or None when not captured)."""
        return self.snap.cmd("kernel_log")
