"""Shared mining of a Go repository's log calls (the Kubernetes device plugin, the GPU operator).

Every ``klog.Warningf/Errorf/Infof``, ``log.Printf``, ``slog``/``logr`` (``logger.Info("msg", "k", v)``,
``logger.Error(err, "msg")``) and ``fmt.Errorf`` call with a literal message in the non-test,
non-vendored ``.go`` files of the checkout at the tag (see :func:`tools.messages.common.go_messages`).
Warning, error and fatal calls, and the errors built with ``fmt.Errorf``/``errors.New`` (which
are logged where they end up), are all call sites (``call_sites``); such an error is kept only when
it concerns the field's topics (:data:`TOPIC`),
an info call only when it states a fallback, a refusal or a missing device (:data:`INFO_KEEP`).
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.messages import common as c

#: The field's topics: GPUs, drivers, devices, memory, MIG/MPS, CDI, the container toolkit.
TOPIC = re.compile(r"gpu|nvml|nvidia|driver|device|mig\b|mps|cdi|cuda|memory|toolkit|runtime|vgpu|"
                   r"fabric|imex|nvlink|libnvidia|/dev/|resource|allocat|health|xid|visible", re.I)
INFO_KEEP = re.compile(r"fall|disabl|not (found|supported|available|enabled)|unable|fail|no (gpu|device)s?|"
                       r"skipp|ignor|unhealthy|missing", re.I)


def mine(co: c.Checkout, component: str, skip: tuple[str, ...] = ("vendor/", "test", "hack/", "/e2e")) -> tuple[list[c.Entry], dict[str, int]]:
    """Entries and site counts of the checkout's Go log calls."""
    taken: set[str] = set()
    out: list[c.Entry] = []
    counts = {"fatal": 0, "error": 0, "warn": 0, "info": 0, "error_values": 0}
    for rel in co.files("", (".go",)):
        if any(s in rel for s in skip) or rel.endswith("_test.go"):
            continue
        for g in c.go_messages(rel, co.read(rel)):
            is_err_value = g.func.startswith(("fmt.", "errors."))
            if is_err_value:
                counts["error_values"] += 1
            elif g.level != "info":
                counts[g.level] += 1
            if is_err_value and not TOPIC.search(g.template):
                continue
            elif g.level == "info" and not (INFO_KEEP.search(g.template) and TOPIC.search(g.template)):
                continue
            area = Path(rel).parent.name or "main"
            out.append(c.Entry(id=area, level=g.level, template=g.template, where=f"{rel}:{g.line}", style=g.style,
                               cls=c.classify(g.template), attrs=g.attrs))
    out = c.dedupe(out)
    for e in out:
        e.id = c.make_id(component, e.id, e.template, e.style, taken)
    return out, counts
