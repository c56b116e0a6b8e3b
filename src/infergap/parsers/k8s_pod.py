"""``kubectl describe pod`` output (kubectl's ``describe.go``, ``describePod``): the pod's top
fields (``Name:``, ``Status:``, ``Node:``, ``Runtime Class Name:``), per container its
``Limits`` / ``Requests`` (``nvidia.com/gpu:  1``) and ``Mounts`` (``/dev/shm from dshm (rw)``),
the pod's ``Volumes`` (``Type: EmptyDir …``, ``Medium: Memory``, ``SizeLimit: 16Gi``) and the
``Events`` table's messages (``0/3 nodes are available: 3 Insufficient nvidia.com/gpu.``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

_TOP = re.compile(r"^(Name|Namespace|Node|Status|Runtime Class Name|QoS Class):\s{0,40}(.{0,253}?)\s*$")
_MOUNT = re.compile(r"^(/\S{0,400}) from (\S{1,253}) \((r[ow])\)")
_ENTRY = re.compile(r"^([\w./\-]{1,253}):\s{0,40}(.{0,253}?)\s*$")
#: Containers and volumes kept (a paste of a larger pod is cut there).
MAX_ITEMS = 64


class PodContainer(BaseModel):
    """One container: ``limits`` and ``requests`` by resource name, ``mounts`` (path -> volume)."""

    name: str
    image: str | None = None
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)
    mounts: dict[str, str] = Field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """The ``nvidia.com/gpu`` limit (0 when none)."""
        v = self.limits.get("nvidia.com/gpu", "0")
        return int(v) if v.isdigit() else 0


class PodDescription(BaseModel):
    """A described pod: ``fields`` (Name, Status, Node, Runtime Class Name …), ``containers``,
    ``volumes`` (name -> its fields: ``Type``, ``Medium``, ``SizeLimit``), ``events`` (messages)."""

    fields: dict[str, str] = Field(default_factory=dict)
    containers: list[PodContainer] = Field(default_factory=list)
    volumes: dict[str, dict[str, str]] = Field(default_factory=dict)
    events: list[str] = Field(default_factory=list)


def _container_line(pod: PodDescription, sub: str | None, s: str) -> str | None:
    """A line inside a container block (indented by 4 or more); returns the open sub-block."""
    c = pod.containers[-1]
    if s in ("Limits:", "Requests:", "Mounts:", "Environment:"):
        return s[:-1]
    if sub == "Mounts" and (m := _MOUNT.match(s)) is not None:
        c.mounts[m.group(1)] = m.group(2)
    elif sub in ("Limits", "Requests") and (m := _ENTRY.match(s)) is not None and m.group(2):
        (c.limits if sub == "Limits" else c.requests)[m.group(1)] = m.group(2)
    elif s.startswith("Image:"):
        c.image = s.partition(":")[2].strip()
    return sub


def parse_describe_pod(text: str) -> PodDescription:
    """Parse ``kubectl describe pod`` (leading indentation a paste added is tolerated: the
    pod's own fields are the least indented lines).

    NVIDIA/k8s-device-plugin#430 (``tests/fixtures/evidence/k8sdp-430-describe-pod-pending.txt``):

    >>> p = parse_describe_pod("Name:  triton\\nStatus:  Pending\\nContainers:\\n  triton-server:\\n    Limits:\\n"
    ...                        "      nvidia.com/gpu:  1\\n    Mounts:\\n      /models from model-repository (rw)\\n")
    >>> p.fields, [(c.name, c.gpus, c.mounts) for c in p.containers]
    ({'Name': 'triton', 'Status': 'Pending'}, [('triton-server', 1, {'/models': 'model-repository'})])
    """
    pod = PodDescription()
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    base = min((len(ln) - len(ln.lstrip()) for ln in lines), default=0)
    section = sub = None
    for ln in lines:
        ind, s = len(ln) - len(ln.lstrip()) - base, ln.strip()
        if ind == 0:
            section, sub = s[:-1] if s.endswith(":") else None, None
            if (m := _TOP.match(s)) is not None:
                pod.fields.setdefault(m.group(1), m.group(2))
            continue
        if section in ("Containers", "Init Containers") and ind == 2 and s.endswith(":") and len(pod.containers) < MAX_ITEMS:
            pod.containers.append(PodContainer(name=s[:-1]))
        elif section == "Containers" and ind >= 4 and pod.containers:
            sub = _container_line(pod, sub, s)
        elif section == "Volumes" and ind == 2 and s.endswith(":") and len(pod.volumes) < MAX_ITEMS:
            sub = s[:-1]
            pod.volumes[sub] = {}
        elif section == "Volumes" and sub in pod.volumes and (m := _ENTRY.match(s)) is not None:
            pod.volumes[sub][m.group(1)] = m.group(2)
        elif section == "Events" and not s.startswith(("Type ", "----")) and len(pod.events) < MAX_ITEMS:
            pod.events.append(s)
    return pod
