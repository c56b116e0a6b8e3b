"""``docker inspect <container>`` (moby's ``ContainerJSON``: ``api/types/container``): the
``HostConfig`` fields a GPU server depends on — ``DeviceRequests`` (``--gpus``: driver, count or
device ids, capabilities), ``Runtime`` (``nvidia`` for the legacy runtime), ``Devices``
(``--device /dev/nvidia0``), ``ShmSize`` (bytes, Docker's default 64 MiB), ``IpcMode``
(``host`` shares the host's /dev/shm), ``Memory`` (bytes, 0 unlimited), ``Ulimits`` — and the
``NVIDIA_VISIBLE_DEVICES`` of ``Config.Env``.

A paste is the whole document, or the part a ``jq`` filter printed (``jq '.[].HostConfig'``,
``jq '.[].HostConfig.DeviceRequests'``): the parser takes the JSON value it finds and reads it by
what it holds (a container, a ``HostConfig``, or a list of device requests).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from pydantic import BaseModel, Field

#: Characters of a paste parsed as JSON (a larger one is read as far as that).
MAX_CHARS = 4 * 1024 * 1024
#: Brackets tried as the start of the JSON value (words before it may hold a few).
MAX_STARTS = 32


class GpuRequest(BaseModel):
    """One ``DeviceRequests`` entry: ``driver`` (``nvidia``, or empty for the default), ``count``
    (-1 all), ``device_ids``, ``capabilities`` (``[["gpu"]]``)."""

    driver: str = ""
    count: int = 0
    device_ids: list[str] = Field(default_factory=list)
    capabilities: list[list[str]] = Field(default_factory=list)

    @property
    def gpu(self) -> bool:
        """Whether it asks for GPUs (the ``gpu`` capability, or the ``nvidia`` driver)."""
        return self.driver == "nvidia" or any("gpu" in c for c in self.capabilities)


class ContainerConfig(BaseModel):
    """What a ``docker inspect`` paste says of one container; None where the paste lacks the field.
    ``seen``: the keys it held (``DeviceRequests``, ``ShmSize`` …)."""

    name: str | None = None
    requests: list[GpuRequest] | None = None
    runtime: str | None = None
    devices: list[str] | None = None
    shm_size_B: int | None = None
    ipc_mode: str | None = None
    memory_B: int | None = None
    ulimits: dict[str, tuple[int, int]] | None = None
    visible_devices: str | None = None
    seen: list[str] = Field(default_factory=list)

    @property
    def asks_for_gpus(self) -> bool | None:
        """Whether the container is given GPUs (a GPU device request, the ``nvidia`` runtime, an
        ``/dev/nvidia*`` device, or ``NVIDIA_VISIBLE_DEVICES``); None when the paste shows none of
        those fields."""
        if self.requests is None and self.runtime is None and self.devices is None and self.visible_devices is None:
            return None
        return (any(r.gpu for r in self.requests or []) or self.runtime == "nvidia"
                or any(d.startswith("/dev/nvidia") for d in self.devices or [])
                or self.visible_devices not in (None, "", "void", "none"))


def _json(text: str) -> Any:
    """The first JSON value of ``text`` (a jq output, or a document after a line of words), or None."""
    s = text[:MAX_CHARS]
    dec = json.JSONDecoder()
    for start in itertools.islice((i for i, c in enumerate(s) if c in "[{"), MAX_STARTS):
        try:
            return dec.raw_decode(s, start)[0]
        except (ValueError, RecursionError):
            continue
    return None


def _requests(items: Any) -> list[GpuRequest]:
    out = []
    for r in items if isinstance(items, list) else []:
        if isinstance(r, dict):
            caps = [[str(x) for x in c] for c in r.get("Capabilities") or [] if isinstance(c, list)]
            count = r.get("Count")
            out.append(GpuRequest(driver=str(r.get("Driver") or ""), count=count if isinstance(count, int) else 0,
                                  device_ids=[str(x) for x in r.get("DeviceIDs") or []], capabilities=caps))
    return out


def _host_config(c: ContainerConfig, hc: dict[str, Any]) -> None:
    """Read the fields of a ``HostConfig`` object into ``c``."""
    c.seen += [k for k in ("DeviceRequests", "Runtime", "Devices", "ShmSize", "IpcMode", "Memory", "Ulimits") if k in hc]
    if "DeviceRequests" in hc:
        c.requests = _requests(hc["DeviceRequests"])
    if isinstance(hc.get("Runtime"), str):
        c.runtime = hc["Runtime"]
    if "Devices" in hc:
        c.devices = [str(d.get("PathOnHost", "")) for d in hc.get("Devices") or [] if isinstance(d, dict)]
    for key, attr in (("ShmSize", "shm_size_B"), ("Memory", "memory_B")):
        if isinstance(hc.get(key), int):
            setattr(c, attr, hc[key])
    if isinstance(hc.get("IpcMode"), str):
        c.ipc_mode = hc["IpcMode"]
    if "Ulimits" in hc:
        c.ulimits = {str(u.get("Name")): (int(u.get("Soft", 0)), int(u.get("Hard", 0)))
                     for u in hc.get("Ulimits") or [] if isinstance(u, dict) and isinstance(u.get("Soft", 0), int) and isinstance(u.get("Hard", 0), int)}


def parse_docker_inspect(text: str) -> list[ContainerConfig]:
    """The containers of a ``docker inspect`` paste (one for a ``HostConfig`` or a list of device
    requests printed by ``jq``); empty when the text holds none of them. Never raises for text.

    Notifiarr/dockwatch#29 (``tests/fixtures/evidence/docker-dockwatch29-device-requests.txt``),
    ``docker inspect plex | jq -r ".[].HostConfig.DeviceRequests"``:

    >>> c = parse_docker_inspect('[\\n  {\\n    "Driver": "nvidia",\\n    "Count": 1,\\n    "DeviceIDs": null,\\n'
    ...                          '    "Capabilities": [\\n      [\\n        "gpu"\\n      ]\\n    ],\\n    "Options": null\\n  }\\n]')[0]
    >>> [(r.driver, r.count, r.gpu) for r in c.requests], c.asks_for_gpus, c.shm_size_B
    ([('nvidia', 1, True)], True, None)
    """
    body = text.lstrip()
    # A whole ``docker inspect``'s part begins at its ``"Id": …,`` line (the record's start line):
    # the ``[`` and ``{`` above it are not in the part.
    doc = _json("{" + body if body.startswith('"') else body)
    items = doc if isinstance(doc, list) else [doc]
    if items and all(isinstance(x, dict) and ("Capabilities" in x or "Driver" in x) and "HostConfig" not in x for x in items):
        return [ContainerConfig(requests=_requests(items), seen=["DeviceRequests"])]
    out = []
    for x in items:
        if not isinstance(x, dict):
            continue
        c = ContainerConfig(name=str(x["Name"]).lstrip("/") if isinstance(x.get("Name"), str) else None)
        hc = x.get("HostConfig") if isinstance(x.get("HostConfig"), dict) else x if "ShmSize" in x or "DeviceRequests" in x else None
        if hc is None:
            continue
        _host_config(c, hc)
        env = (x.get("Config") or {}).get("Env") if isinstance(x.get("Config"), dict) else None
        for e in env or []:
            if isinstance(e, str) and e.startswith("NVIDIA_VISIBLE_DEVICES="):
                c.visible_devices = e.partition("=")[2]
        out.append(c)
    return out
