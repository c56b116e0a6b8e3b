"""Executable remedy actions: validation against the catalog's allow-lists, read, apply, restore.

Only the :class:`~infergap.findings.Action` types implemented here can run, and only on targets
the allow-lists below accept. Nothing here ever runs a command string taken from a report or a
log: the ``commands`` strings of a remedy are for display. Every command has a timeout.

Sources for the targets and register encodings: the check catalog
(``data/checks.yaml``); sysctl semantics from the kernel's
``Documentation/admin-guide/sysctl/{kernel,vm,net}.rst``; the PCIe Device Control register
(MRRS in bits 14:12, offset 8 of the PCI Express capability) and ACS Control (offset 6 of the ACS
extended capability) from the PCI Express Base Specification as encoded by ``setpci(8)``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from infergap import checks
from infergap.checks import action_targets, command
from infergap.shellcmd import valid
from infergap.findings import Action
from infergap.remedy.system import SystemPaths

#: Timeout of every command a remedy runs (modprobe, setpci, nvidia-smi), in seconds.
COMMAND_TIMEOUT_S = 30.0

#: Sysctl keys the catalog knows, with the check id that declares each (``actions`` of
#: ``data/checks.yaml``): the allow-list of the sysctl handler.
SYSCTL_KEYS: dict[str, str] = action_targets("sysctl")

#: Sysctls that belong to the network namespace (writable inside a container that has its own):
#: every other key is the host's. From the kernel's ``net/core/sysctl_net_core.c`` (somaxconn is
#: per-netns) and ``net/ipv4/sysctl_net_ipv4.c`` (``ipv4_net_table``).
NETNS_SYSCTLS = frozenset({
    "net.core.somaxconn", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_max_syn_backlog",
    "net.ipv4.ip_local_port_range",
})

#: Kernel modules a remedy may load (the catalog's ``modprobe`` targets: nvidia_peermem).
MODULES = frozenset(action_targets("modprobe"))

#: setpci register expressions a remedy may write (the catalog's ``setpci`` targets: PCIe Device
#: Control for MRRS, bits 14:12; ACS Control). Keys are the canonical spelling; values the check id.
SETPCI_REGISTERS: dict[str, str] = action_targets("setpci")

# Anchored with \A/\Z (``$`` accepts a trailing newline) and ASCII only (``\d`` and
# ``str.isdigit`` accept non-ASCII digits): a report or a journal is input (docs/security.md).
BDF_RE = re.compile(r"\A[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z", re.ASCII)
_HEX_WORD_RE = re.compile(r"\A(0x)?[0-9a-fA-F]{1,4}\Z", re.ASCII)
_WORD_RE = re.compile(r"\A[0-9a-f]{4}\Z", re.ASCII)
#: The udev rule :meth:`SetpciHandler.persist_files` writes: setpci by absolute path, one PCI
#: function, one register, a value and a mask.
_UDEV_RULE_RE = re.compile(r'\AACTION=="add", SUBSYSTEM=="pci", KERNEL=="(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", '
                           r'RUN\+="/[A-Za-z0-9_./-]{0,200}/setpci -s (?P<bdf2>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) '
                           r'(?P<reg>[A-Z][A-Z_]{0,15}\+[0-9A-F]{1,3}\.w)=[0-9a-f]{4}:[0-9a-f]{4}"\Z', re.ASCII)
_CPU_STATES_RE = re.compile(r"\Acpu[0-9]{1,5}=[01]( cpu[0-9]{1,5}=[01]){0,8191}\Z", re.ASCII)


def undeclared(check_id: str, a: Action) -> str | None:
    """Why the catalog entry of ``check_id`` does not let ``infergap fix`` run ``a`` (None when
    it does): the entry must declare the action's type and, where it lists targets, this target
    (a sysctl key, a module, a setpci register). Types whose target comes from the host (a
    cpuidle state, a GPU) are checked by their handler's own pattern."""
    c = checks.load().get(check_id)
    if c is None:
        return f"{check_id!r} is not a check of the catalog"
    specs = [s for s in c.actions if s.type == a.type]
    if not specs:
        return f"the catalog entry of {check_id} declares no {a.type} action"
    target = {"modprobe": a.target.replace("-", "_"),
              "setpci": (a.pci_register or "").replace("+0x", "+").upper().replace(".W", ".w")}.get(a.type, a.target)
    if any(not s.targets or target in s.targets for s in specs):
        return None
    return f"the catalog entry of {check_id} declares no {a.type} action on {target}"


class RemedyRefused(Exception):
    """An action that will not run; the message is the reason, in one line."""


class RemedyFailed(Exception):
    """An action that was attempted and failed (write rejected, command failed or timed out)."""


@dataclass
class PersistFile:
    """A file the persistent form of an action writes: its path and its full new content."""

    path: Path
    content: str


def normalize(value: str | None) -> str | None:
    """A read-back value with whitespace runs collapsed (``tcp_rmem`` is tab-separated)."""
    return None if value is None else " ".join(value.split())


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which(argv[0])
    if exe is None:
        raise RemedyFailed(f"{argv[0]} not found on PATH")
    try:
        r = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RemedyFailed(f"{' '.join(argv)} timed out after {COMMAND_TIMEOUT_S:.0f} s") from None
    except OSError as e:
        raise RemedyFailed(f"{' '.join(argv)}: {e.strerror or e}") from None
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RemedyFailed(f"{' '.join(argv)} exited {r.returncode}{(': ' + msg[-1]) if msg else ''}")
    return r


class Handler(ABC):
    """Code path of one action type. ``before`` values are strings as read back from the system."""

    #: Whether a persistent form exists (``--persist``).
    persistable = True

    def __init__(self, paths: SystemPaths) -> None:
        self.paths = paths

    @abstractmethod
    def validate(self, a: Action) -> None:
        """Raise :class:`RemedyRefused` unless the action's target and values are in the allow-lists."""

    @abstractmethod
    def read(self, a: Action) -> str:
        """The current value on this machine; raises :class:`RemedyFailed` when unreadable."""

    @abstractmethod
    def intended(self, a: Action, before: str) -> str:
        """The value the system should show after the action, given the value before it."""

    def matches(self, a: Action, value: str, want: str) -> bool:
        """Whether a read-back ``value`` equals the value ``want``."""
        return normalize(value) == normalize(want)

    @abstractmethod
    def apply(self, a: Action) -> None:
        """Make the change; raises :class:`RemedyFailed`."""

    @abstractmethod
    def restore(self, a: Action, before: str) -> None:
        """Put back the value ``before``; raises :class:`RemedyFailed`."""

    @abstractmethod
    def command(self, a: Action) -> str:
        """The change as a shell command, for display and the journal."""

    @abstractmethod
    def revert_command(self, a: Action, before: str) -> str:
        """The restore as a shell command, for display and the journal."""

    def host_owned(self, a: Action) -> bool:
        """Whether the setting belongs to the host when running inside a container."""
        return True

    def same_as_audit(self, a: Action, now: str) -> bool:
        """Whether the value read now equals the value the audit saw (``a.previous``; an action
        without one is taken as unchanged)."""
        return a.previous is None or normalize(now) == normalize(a.previous)

    def persist_files(self, a: Action) -> list[PersistFile]:
        """The files ``--persist`` writes (full new content, computed from their current content)."""
        return []

    #: The files ``--persist`` may write, relative to the ``etc`` root: the only files a revert
    #: restores or removes.
    FILES: tuple[str, ...] = ()

    def valid_state(self, value: str) -> bool:
        """Whether ``value`` (a journalled ``before``) is a state this handler reads and may
        restore; a journal is input, so ``fix --revert`` writes nothing else."""
        return False

    @classmethod
    def foreign_line(cls, content: bytes) -> str | None:
        """The first line of ``content`` (a journalled previous content of one of :attr:`FILES`)
        that is not of the form ``--persist`` of this handler writes, or None when every line is
        of that form, a comment or blank. ``--persist`` keeps the lines it found (an
        administrator's own), so the form, not the catalog's targets, is what is held: integer
        sysctls, module names, and for udev only the setpci rule of a catalog register. A journal
        is input: ``fix --revert`` restores no file from which a boot would run a command
        (``kernel.core_pattern = |…``, a udev ``RUN+="/bin/sh …"``)."""
        try:
            text = content.decode("ascii")
        except UnicodeDecodeError:
            return "(not ASCII text)"
        for line in text.splitlines():
            s = line.strip()
            if s and not s.startswith("#") and not cls.persisted_line(s):
                return line
        return None

    @classmethod
    def persisted_line(cls, line: str) -> bool:
        """Whether ``line`` (stripped, not a comment) is one ``--persist`` of this handler writes."""
        return False


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


class SysctlHandler(Handler):
    """``sysctl``: reads and writes ``<proc_sys>/<key with dots as slashes>``; persists to
    ``<etc>/sysctl.d/90-infergap.conf`` (read by ``systemd-sysctl`` and ``sysctl --system`` at boot)."""

    CONF = "sysctl.d/90-infergap.conf"
    FILES = (CONF,)

    def valid_state(self, value: str) -> bool:
        return valid("sysctl_value", value)

    @classmethod
    def persisted_line(cls, line: str) -> bool:
        key, sep, value = line.partition("=")
        return bool(sep) and valid("sysctl_key", key.strip().removeprefix("-")) and valid("sysctl_value", value.strip())

    def validate(self, a: Action) -> None:
        if a.target not in SYSCTL_KEYS:
            raise RemedyRefused(f"sysctl {a.target!r} is not a key the check catalog knows")
        if a.value is None or not valid("sysctl_value", a.value) or a.value != a.value.strip():
            raise RemedyRefused(f"sysctl {a.target}: value {a.value!r} is not one to four integers")

    def _path(self, a: Action) -> Path:
        return self.paths.proc_sys / a.target.replace(".", "/")

    def read(self, a: Action) -> str:
        try:
            return normalize(self._path(a).read_text()) or ""
        except OSError as e:
            raise RemedyFailed(f"cannot read {self._path(a)}: {e.strerror or e}") from None

    def intended(self, a: Action, before: str) -> str:
        return normalize(a.value) or ""

    def _write(self, a: Action, value: str) -> None:
        path = self._path(a)
        try:
            with open(path, "w") as f:
                f.write(value + "\n")
        except OSError as e:
            raise RemedyFailed(f"write {value!r} to {path}: {e.strerror or e}") from None

    def apply(self, a: Action) -> None:
        self._write(a, normalize(a.value) or "")

    def restore(self, a: Action, before: str) -> None:
        self._write(a, before)

    def command(self, a: Action) -> str:
        return command(None, "sysctl_set", key=a.target, value=normalize(a.value) or "")

    def revert_command(self, a: Action, before: str) -> str:
        return command(None, "sysctl_set", key=a.target, value=normalize(before) or "")

    def host_owned(self, a: Action) -> bool:
        return a.target not in NETNS_SYSCTLS

    def persist_files(self, a: Action) -> list[PersistFile]:
        path = self.paths.etc / self.CONF
        lines = [ln for ln in _read_text(path).splitlines()
                 if ln.split("=", 1)[0].strip() != a.target]
        if not lines:
            lines = ["# Written by infergap fix --persist; 'infergap fix --revert' restores the previous content."]
        lines.append(f"{a.target} = {normalize(a.value)}")
        return [PersistFile(path, "\n".join(lines) + "\n")]


class ModprobeHandler(Handler):
    """``modprobe``: loads an allow-listed module; state ``loaded``/``absent`` from
    ``<sys>/module/<name>``; persists to ``<etc>/modules-load.d/infergap.conf``."""

    FILES = ("modules-load.d/infergap.conf",)

    def valid_state(self, value: str) -> bool:
        return value in ("loaded", "absent")

    @classmethod
    def persisted_line(cls, line: str) -> bool:
        return valid("module", line)

    def _name(self, a: Action) -> str:
        return a.target.replace("-", "_")

    def validate(self, a: Action) -> None:
        if self._name(a) not in MODULES:
            raise RemedyRefused(f"module {a.target!r} is not one the check catalog loads ({', '.join(sorted(MODULES))})")

    def read(self, a: Action) -> str:
        return "loaded" if (self.paths.sys / "module" / self._name(a)).is_dir() else "absent"

    def intended(self, a: Action, before: str) -> str:
        return "loaded"

    def apply(self, a: Action) -> None:
        _run(["modprobe", self._name(a)])

    def restore(self, a: Action, before: str) -> None:
        if before == "absent":
            _run(["modprobe", "-r", self._name(a)])

    def command(self, a: Action) -> str:
        return command(None, "modprobe_load", module=self._name(a))

    def revert_command(self, a: Action, before: str) -> str:
        return command(None, "modprobe_unload", module=self._name(a)) if before == "absent" else "(module was loaded before: nothing to do)"

    def persist_files(self, a: Action) -> list[PersistFile]:
        path = self.paths.etc / "modules-load.d/infergap.conf"
        lines = [ln for ln in _read_text(path).splitlines() if ln.strip() != self._name(a)]
        return [PersistFile(path, "\n".join([*lines, self._name(a)]) + "\n")]


class SetpciHandler(Handler):
    """``setpci``: a masked write of one allow-listed 16-bit register of one PCI function.
    Restore writes the previous bits under the same mask. Persists as a udev rule that re-applies
    the write when the device is added (``<etc>/udev/rules.d/90-infergap-setpci.rules``)."""

    RULES = "udev/rules.d/90-infergap-setpci.rules"
    FILES = (RULES,)

    def valid_state(self, value: str) -> bool:
        return _WORD_RE.match(value) is not None

    @classmethod
    def persisted_line(cls, line: str) -> bool:
        m = _UDEV_RULE_RE.match(line)
        return m is not None and m["bdf"] == m["bdf2"] and m["reg"] in SETPCI_REGISTERS

    def _reg(self, a: Action) -> str:
        reg = (a.pci_register or "").replace("+0x", "+").upper().replace(".W", ".w")
        return reg

    def validate(self, a: Action) -> None:
        if not BDF_RE.match(a.target):
            raise RemedyRefused(f"setpci target {a.target!r} is not a PCI address (dddd:bb:dd.f)")
        if self._reg(a) not in SETPCI_REGISTERS:
            raise RemedyRefused(f"setpci register {a.pci_register!r} is not one the check catalog writes ({', '.join(SETPCI_REGISTERS)})")
        for name, v in (("value", a.value), ("mask", a.mask)):
            if v is None or not _HEX_WORD_RE.match(v):
                raise RemedyRefused(f"setpci {a.target}: {name} {v!r} is not a 16-bit hex word")

    @staticmethod
    def _int(v: str) -> int:
        return int(v, 16)

    def read(self, a: Action) -> str:
        r = _run(["setpci", "-s", a.target, self._reg(a)])
        word = r.stdout.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{4}", word):
            raise RemedyFailed(f"setpci -s {a.target} {self._reg(a)} printed {word!r}, not a 16-bit word")
        return word

    def intended(self, a: Action, before: str) -> str:
        mask = self._int(a.mask or "0")
        return f"{(self._int(before) & ~mask) | (self._int(a.value or '0') & mask):04x}"

    def same_as_audit(self, a: Action, now: str) -> bool:
        """Compared under the mask: the audit may record the whole word (ACS Control) or only the
        masked bits (DevCtl bits 14:12 for MRRS)."""
        if a.previous is None:
            return True
        mask = self._int(a.mask or "ffff")
        return _HEX_WORD_RE.match(a.previous) is not None and (self._int(a.previous) & mask) == (self._int(now) & mask)

    def matches(self, a: Action, value: str, want: str) -> bool:
        mask = self._int(a.mask or "0")
        return (self._int(value) & mask) == (self._int(want) & mask)

    def _arg(self, a: Action, value: str) -> str:
        return f"{self._reg(a)}={self._int(value):04x}:{self._int(a.mask or '0'):04x}"

    def apply(self, a: Action) -> None:
        _run(["setpci", "-s", a.target, self._arg(a, a.value or "0")])

    def restore(self, a: Action, before: str) -> None:
        _run(["setpci", "-s", a.target, self._arg(a, before)])

    def _cmd(self, a: Action, value: str) -> str:
        return command(None, "setpci_write", bdf=a.target, reg=self._reg(a), value=f"{self._int(value):04x}", mask=f"{self._int(a.mask or '0'):04x}")

    def command(self, a: Action) -> str:
        return self._cmd(a, a.value or "0")

    def revert_command(self, a: Action, before: str) -> str:
        return self._cmd(a, before)

    def persist_files(self, a: Action) -> list[PersistFile]:
        path = self.paths.etc / self.RULES
        exe = shutil.which("setpci") or "/usr/bin/setpci"
        prefix = f'ACTION=="add", SUBSYSTEM=="pci", KERNEL=="{a.target}", RUN+="{exe} -s {a.target} {self._reg(a)}='
        lines = [ln for ln in _read_text(path).splitlines() if not ln.startswith(prefix)]
        lines.append(f'{prefix}{self._arg(a, a.value or "0").split("=", 1)[1]}"')
        return [PersistFile(path, "\n".join(lines) + "\n")]


class CpuidleHandler(Handler):
    """``cpuidle``: sets ``disable`` of the idle state named ``target`` on every CPU
    (``<sys>/devices/system/cpu/cpu*/cpuidle/state*/{name,disable}``, kernel
    ``Documentation/admin-guide/pm/cpuidle.rst``). The value read is per CPU
    (``cpu0=0 cpu1=0 …``) so that restore puts back each CPU's own setting. No persistent form
    (the boot-time equivalent is a kernel parameter: a reboot fix)."""

    persistable = False

    def valid_state(self, value: str) -> bool:
        return _CPU_STATES_RE.match(value) is not None

    def validate(self, a: Action) -> None:
        if not valid("cstate", a.target):
            raise RemedyRefused(f"cpuidle state name {a.target!r} is not valid")
        if (a.value or "1") not in ("0", "1"):
            raise RemedyRefused(f"cpuidle {a.target}: disable value {a.value!r} is not 0 or 1")

    def _files(self, a: Action) -> dict[str, Path]:
        out: dict[str, Path] = {}
        base = self.paths.sys / "devices/system/cpu"
        for name_file in sorted(base.glob("cpu[0-9]*/cpuidle/state[0-9]*/name")):
            if _read_text(name_file).strip() == a.target:
                out[name_file.parent.parent.parent.name] = name_file.parent / "disable"
        if not out:
            raise RemedyFailed(f"no CPU has an idle state named {a.target!r} under {base}")
        return dict(sorted(out.items(), key=lambda kv: int(kv[0][3:])))

    def read(self, a: Action) -> str:
        return " ".join(f"{cpu}={_read_text(p).strip()}" for cpu, p in self._files(a).items())

    def intended(self, a: Action, before: str) -> str:
        return " ".join(f"{item.split('=')[0]}={a.value or '1'}" for item in before.split())

    def same_as_audit(self, a: Action, now: str) -> bool:
        if a.previous is None:
            return True
        if "=" not in a.previous:  # one value for every CPU
            return all(item.split("=", 1)[1] == a.previous.strip() for item in now.split())
        return normalize(now) == normalize(a.previous)

    def _write(self, values: dict[str, str], files: dict[str, Path]) -> None:
        for cpu, v in values.items():
            try:
                files[cpu].write_text(v + "\n")
            except (OSError, KeyError) as e:
                raise RemedyFailed(f"write {v} to {cpu} cpuidle disable: {getattr(e, 'strerror', None) or e}") from None

    def apply(self, a: Action) -> None:
        files = self._files(a)
        self._write({cpu: a.value or "1" for cpu in files}, files)

    def restore(self, a: Action, before: str) -> None:
        self._write(dict(item.split("=", 1) for item in before.split()), self._files(a))

    def command(self, a: Action) -> str:
        return command(None, "cpuidle_set_by_name", name=a.target, value=a.value or "1")

    def revert_command(self, a: Action, before: str) -> str:
        return f"restore each CPU's {a.target} disable flag: {before}"


class PersistenceHandler(Handler):
    """``nvidia_persistence``: ``nvidia-smi -i <BDF> -pm 1``; state ``1``/``0`` from
    ``nvidia-smi -i <BDF> --query-gpu=persistence_mode --format=csv,noheader`` (Enabled/Disabled),
    the encoding of the audit's ``value``/``previous``. No persistent file (the persistent form is
    the ``nvidia-persistenced`` service)."""

    persistable = False

    def valid_state(self, value: str) -> bool:
        return value in ("0", "1")

    def validate(self, a: Action) -> None:
        if not BDF_RE.match(a.target):
            raise RemedyRefused(f"GPU {a.target!r} is not a PCI address (dddd:bb:dd.f)")

    def read(self, a: Action) -> str:
        r = _run(["nvidia-smi", "-i", a.target, "--query-gpu=persistence_mode", "--format=csv,noheader"])
        state = r.stdout.strip()
        if state not in ("Enabled", "Disabled"):
            raise RemedyFailed(f"nvidia-smi printed {state!r} for the persistence mode of {a.target}")
        return "1" if state == "Enabled" else "0"

    def intended(self, a: Action, before: str) -> str:
        return "1"

    def apply(self, a: Action) -> None:
        _run(["nvidia-smi", "-i", a.target, "-pm", "1"])

    def restore(self, a: Action, before: str) -> None:
        if before == "0":
            _run(["nvidia-smi", "-i", a.target, "-pm", "0"])

    def command(self, a: Action) -> str:
        return command(None, "persistence_set", bdf=a.target, mode="1")

    def revert_command(self, a: Action, before: str) -> str:
        return command(None, "persistence_set", bdf=a.target, mode="0") if before == "0" else "(was enabled before: nothing to do)"


HANDLERS: dict[str, type[Handler]] = {
    "sysctl": SysctlHandler, "modprobe": ModprobeHandler, "setpci": SetpciHandler,
    "cpuidle": CpuidleHandler, "nvidia_persistence": PersistenceHandler,
}


def handler_for(a: Action, paths: SystemPaths) -> Handler:
    """The validated handler of an action; raises :class:`RemedyRefused` for an unknown type or a
    target/value outside the allow-lists."""
    cls = HANDLERS.get(a.type)
    if cls is None:
        raise RemedyRefused(f"action type {a.type!r} has no implementation")
    h = cls(paths)
    h.validate(a)
    return h
