"""The one way a command shown to users is built from values: validate each value for its kind,
then quote it (:func:`shlex.quote`).

A template is trusted text (from ``data/checks.yaml``) with ``{name:kind}`` placeholders. A value
that came from input (a snapshot, a paste, a server, a report) fills a placeholder only when it
is a valid value of its kind (:data:`KINDS`); otherwise :class:`BadValue` is raised and the caller
shows no command at all, with the error as the note (docs/security.md, class 1). A placeholder
that is a whole shell word never receives a value starting with ``-`` (it would read as an
option). Placeholders must not sit inside quotes of the template: the catalog test checks every
template with hostile values (tests/hostile/test_hostile_commands.py).

>>> fill("sysctl -w {key:sysctl_key}={value:sysctl_value}", key="net.ipv4.tcp_rmem", value="4096 131072 16777216")
"sysctl -w net.ipv4.tcp_rmem='4096 131072 16777216'"
>>> try:
...     fill("cpupower frequency-set -g {governor:governor}", governor="$(reboot)")
... except BadValue as e:
...     print(e)
'$(reboot)' is not a valid governor (a cpufreq governor name)
"""

from __future__ import annotations

import re
import shlex

#: Kind -> (pattern, what it is). Patterns are anchored with ``\\A``/``\\Z`` (``$`` would accept a
#: trailing newline) and compiled with :data:`re.ASCII` (``\\d`` and ``str.isdigit`` accept
#: non-ASCII digits; digits here are ``[0-9]``). Sources: sysctl names and integer values,
#: kernel ``Documentation/admin-guide/sysctl/``; governor names at most CPUFREQ_NAME_LEN (16) bytes,
#: ``include/linux/cpufreq.h``; interface names below IFNAMSIZ (16), ``include/uapi/linux/if.h``;
#: PCI addresses ``domain:bus:device.function``, ``lspci(8)``; environment names, POSIX.1-2017
#: §8.1; compute modes, ``nvidia-smi(1)`` ``-c``; amd_pstate modes,
#: ``Documentation/admin-guide/pm/amd-pstate.rst``; sizes as ``df -h`` prints them.
KINDS: dict[str, tuple[str, str]] = {
    "sysctl_key": (r"[a-z0-9_]{1,64}(\.[a-z0-9_]{1,64}){1,8}", "a sysctl name"),
    "sysctl_value": (r"-?[0-9]{1,20}([ \t]{1,4}-?[0-9]{1,20}){0,3}", "a sysctl value of one to four integers"),
    "governor": (r"[a-z][a-z0-9_]{0,14}", "a cpufreq governor name"),
    "interface": (r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}", "a network interface name"),
    "bdf": (r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", "a PCI address (dddd:bb:dd.f)"),
    "setpci_reg": (r"[A-Z][A-Z_]{0,15}\+(0x)?[0-9a-fA-F]{1,3}\.[bwl]", "a setpci register expression"),
    "hex_word": (r"[0-9a-fA-F]{4}", "a 16-bit hex word"),
    "int": (r"[0-9]{1,15}", "a non-negative integer"),
    "int_list": (r"[0-9]{1,6}(-[0-9]{1,6})?(,[0-9]{1,6}(-[0-9]{1,6})?){0,255}", "a list of integers and ranges"),
    "number": (r"[0-9]{1,15}(\.[0-9]{1,6})?", "a non-negative number"),
    "size": (r"[0-9]{1,15}(\.[0-9]{1,3})?[kKmMgGtTpP]?", "a size (64M, 1.5G)"),
    "env_name": (r"[A-Za-z_][A-Za-z0-9_]{0,127}", "an environment variable name"),
    "env_value": (r"[\x20-\x7e]{0,512}", "an environment variable value of printable ASCII"),
    "module": (r"[a-z0-9_]{1,56}", "a kernel module name"),
    "cstate": (r"[A-Za-z0-9_][A-Za-z0-9_-]{0,15}", "a cpuidle state name"),
    "compute_mode": (r"DEFAULT|EXCLUSIVE_THREAD|EXCLUSIVE_PROCESS|PROHIBITED", "an nvidia-smi compute mode"),
    "pstate_mode": (r"active|passive|guided", "an amd_pstate mode"),
    "kernel_release": (r"[A-Za-z0-9_][A-Za-z0-9._+~-]{0,63}", "a kernel release"),
    "url": (r"https?://(?:[A-Za-z0-9._~-]{1,253}|\[[0-9a-fA-F:.]{2,45}\])(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/%-]{0,512})?", "an http(s) URL"),
}

_RE = {k: re.compile(r"\A(?:" + p + r")\Z", re.ASCII) for k, (p, _) in KINDS.items()}

#: ``{name:kind}`` in a template.
PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*):([a-z_]+)\}")


class BadValue(ValueError):
    """A value that is not valid for its kind: no command is built. ``str()`` is the note."""

    def __init__(self, value: object, kind: str, why: str | None = None) -> None:
        self.value, self.kind = value, kind
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        super().__init__(f"{shown} is not a valid {kind.replace('_', ' ')} ({why or KINDS.get(kind, ('', 'unknown kind'))[1]})")


def valid(kind: str, value: object) -> bool:
    """Whether ``value`` (a ``str`` or ``int``; a ``bool`` never) is a valid value of ``kind``.

    Raises KeyError for a kind not in :data:`KINDS` (a mistake in a template, not in the input).

    >>> valid("int", "12"), valid("int", "١٢"), valid("int", "12\\n")
    (True, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return False
    return _RE[kind].match(str(value)) is not None


def word(kind: str, value: object) -> str:
    """``value`` as one shell word: validated for ``kind``, then :func:`shlex.quote`-d.
    Raises :class:`BadValue`."""
    if not valid(kind, value):
        raise BadValue(value, kind)
    return shlex.quote(str(value))


def placeholders(template: str) -> list[tuple[str, str]]:
    """``(name, kind)`` of each placeholder of ``template``, in order."""
    return [(m.group(1), m.group(2)) for m in PLACEHOLDER.finditer(template)]


def _whole_word(template: str, m: re.Match[str]) -> bool:
    before = template[m.start() - 1] if m.start() else " "
    after = template[m.end()] if m.end() < len(template) else " "
    return before.isspace() and after.isspace()


def fill(template: str, **values: object) -> str:
    """``template`` with each ``{name:kind}`` replaced by :func:`word` of ``values[name]``.

    Raises :class:`BadValue` for a value invalid for its kind, or starting with ``-`` where the
    placeholder is a whole word; KeyError for a placeholder without a value or an unknown kind.
    """
    def sub(m: re.Match[str]) -> str:
        name, kind = m.group(1), m.group(2)
        v = values[name]
        if _whole_word(template, m) and str(v).startswith("-"):
            raise BadValue(v, kind, "a value starting with '-' would be read as an option")
        return word(kind, v)
    return PLACEHOLDER.sub(sub, template)
