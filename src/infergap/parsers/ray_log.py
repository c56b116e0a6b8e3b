"""Ray's driver and node logs as evidence: where the object store was placed and how much
``/dev/shm`` Ray found.

Ray logs with Python's logging in its own format, ``2021-01-20 16:57:03,655\tWARNING
services.py:1628 -- WARNING: …`` (``python/ray/_private/ray_logging`` formatter
``%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s``). Two messages are read:

- ``The object store is using /tmp instead of /dev/shm because /dev/shm has only N bytes
  available.`` from ``determine_plasma_store_config`` in ``python/ray/_private/services.py``
  (ray-project/ray pull request #3149 introduced the fall-back, #14629 and #40736 reworded it):
  the object store was put on disk, and ``N`` is what ``/dev/shm`` offered;
- every other line of that format is counted (``View the Ray dashboard at …``), so a Ray log is
  recognised as one even when it holds no fall-back.

A prefix Ray puts on an actor's output (``(raylet) ``, ``(pid=123) ``) is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: One Ray log line: ``yyyy-mm-dd hh:mm:ss,mmm<TAB or spaces>LEVEL file.py:N -- ``.
LINE = re.compile(r"^(?:\([\w ,=.-]{1,80}\) )?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\s{1,8}(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) [\w.]{1,80}\.py:\d{1,6} -- ")
_SHM = re.compile(r"object store is using (\S{1,200}) instead of /dev/shm because /dev/shm has only (\d{1,20}) bytes available")
_SHM_SIZE_HINT = re.compile(r"--shm-size=(\d{1,6}(?:\.\d{1,4})?)gb")


def is_ray_line(line: str) -> bool:
    """True for a line of a Ray log.

    >>> is_ray_line("2021-01-20 16:57:03,655\\tWARNING services.py:1628 -- WARNING: The object store is using /tmp")
    True
    >>> is_ray_line("INFO 05-15 11:07:08 [api_server.py:1] vLLM")
    False
    """
    return " -- " in line and ".py:" in line and bool(LINE.match(line.lstrip()))


@dataclass
class RayLogFacts:
    """What a Ray log says: ``object_store_dir`` the directory Ray put its object store in when
    it fell back from ``/dev/shm`` (None when the log shows no fall-back),
    ``shm_available_bytes`` what ``/dev/shm`` offered then (bytes), ``shm_size_hint_gb`` the
    ``--shm-size`` Ray recommended (GB, 1.1 × its object store size), ``evidence`` the line
    behind them, ``ray_lines`` the Ray log lines read."""

    object_store_dir: str | None = None
    shm_available_bytes: int | None = None
    shm_size_hint_gb: float | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    ray_lines: int = 0


def parse_ray_log(lines: Iterable[str]) -> RayLogFacts:
    """Read a Ray log (cleaned lines) into :class:`RayLogFacts`.

    >>> f = parse_ray_log(["2021-01-20 16:57:03,655\\tWARNING services.py:1628 -- WARNING: The object store is using /tmp "
    ...     "instead of /dev/shm because /dev/shm has only 46198665216 bytes available. This will harm performance! "
    ...     "You may be able to free up space by deleting files in /dev/shm. If you are inside a Docker container, you "
    ...     "can increase /dev/shm size by passing '--shm-size=Xgb' to 'docker run'"])
    >>> (f.object_store_dir, f.shm_available_bytes, f.shm_size_hint_gb, f.ray_lines)
    ('/tmp', 46198665216, None, 1)

    A message wrapped onto indented lines is joined first:

    >>> parse_ray_log(["2025-10-09 20:16:32,652    WARNING services.py:2159 -- WARNING: The object store is using /tmp instead",
    ...     "  of /dev/shm because /dev/shm has only 5368709120 bytes available. This will harm performance! You may",
    ...     "  increase /dev/shm size by passing '--shm-size=10.24gb' to 'docker run'"]).shm_size_hint_gb
    10.24
    """
    f = RayLogFacts()
    msg: list[str] = []
    for line in lines:
        s = line.strip()
        if is_ray_line(s):
            f.ray_lines += 1
            _message(f, " ".join(msg))
            msg = [s]
        elif msg and line[:1] in (" ", "\t") and s and sum(map(len, msg)) < 4000:
            msg.append(s)  # the message wrapped onto an indented line
        else:
            _message(f, " ".join(msg))
            msg = []
    _message(f, " ".join(msg))
    return f


def _message(f: RayLogFacts, s: str) -> None:
    """Read one whole Ray message (its wrapped lines joined) into ``f``."""
    if "object store is using" not in s:
        return
    m = _SHM.search(s)
    if m:
        f.object_store_dir, f.shm_available_bytes = m.group(1), int(m.group(2))
        h = _SHM_SIZE_HINT.search(s)
        f.shm_size_hint_gb = float(h.group(1)) if h else None
        f.evidence["object_store"] = s[:2000]
