"""The serving process's record (:class:`ProcessEvidence`, what
:func:`infergap.snapshot.process.read_process` reads from ``/proc`` and NVML) and the parser of
the snapshot's ``probes/process.json`` that holds such records.

The record is the typed value both sides share: the snapshot writes it when it collects, the
facts read it back through :func:`parse_process_probe`, so neither imports the other.
"""

from __future__ import annotations


from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ProcessEvidence(BaseModel):
    """What the serving process runs with. Units: bytes, seconds, CPU numbers.

    ``argv``: the command line, secrets replaced by ``<scrubbed>``; ``env``: the kept variables
    (a variable set to the empty string is kept: ``CUDA_VISIBLE_DEVICES=`` hides every GPU);
    ``threads``: thread count; ``thread_names``: comm → count; ``cpu_time_s``: user + system
    time of the process; ``thread_cpu_s``: per-thread CPU seconds (tid → s) to compare across a
    load; ``cpus_allowed``: the affinity list (``0-15``); ``cgroup``: limits read (``cpu.max``,
    ``memory.max``, ``cpuset.cpus.effective``); ``gpu_memory_B``: GPU memory NVML attributes to
    the process (None when NVML is absent or does not list it, with the reason in ``gpu_note``);
    ``sources``: field → where it was read; ``problems``: what could not be read."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    url: str
    pid: int
    port: int
    exe: str | None = None
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    threads: int | None = None
    thread_names: dict[str, int] = Field(default_factory=dict)
    cpu_time_s: float | None = None
    thread_cpu_s: dict[str, float] = Field(default_factory=dict)
    read_at: float | None = None
    cpus_allowed: str | None = None
    cpus_allowed_count: int | None = None
    host_cpus: int | None = None
    cgroup: dict[str, str] = Field(default_factory=dict)
    gpu_memory_B: int | None = None
    gpu_note: str | None = None
    netns: str | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)


def parse_process_probe(data: object) -> tuple[list[ProcessEvidence], str | None]:
    """The serving processes of a snapshot's ``probes/process.json``
    (:func:`infergap.snapshot.process.process_probe`) as
    :class:`ProcessEvidence`, and the probe's note; a malformed entry
    is skipped and named in the note. ``([], None)`` when ``data`` is not such a probe."""
    if not isinstance(data, dict) or not isinstance(data.get("processes"), list):
        return [], None
    out, bad = [], 0
    for item in data["processes"][:64]:
        try:
            out.append(ProcessEvidence.model_validate(item))
        except ValidationError:
            bad += 1
    note = str(data.get("note") or "")[:500] + (f"; {bad} malformed entr{'y' if bad == 1 else 'ies'} skipped" if bad else "")
    return out, note or None
