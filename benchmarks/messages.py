"""Coverage of the message catalogs (``src/infergap/data/messages``), per component and tag.

For each catalog: the warning/error call sites (or error codes) its mining script found upstream,
how many of them are in the catalog, how many map to a check, how many are explained only (a
meaning without a check; "routed" counts the checks given by ``data/message_routes.yaml`` from the
entry's class rather than by a person), and how many of those meanings a person wrote (curated) rather than the
class rules generated. "Explained" means the entry has a curated meaning, or the keyword rules gave
it a class other than ``informational``, so its generated meaning says what the message concerns
(network, P2P, memory, driver, device, limit, fallback, crash, config, internal consistency).

Targets (issue 25): NCCL WARN sites >= 95 % explained; CUDA and NVML error codes 100 % (every code
has an entry that can match it); each engine's GPU/memory/communication warnings >= 80 %
(``kept_sites / topic_sites`` of the engine catalogs' headers). Exits 1 when a target is missed.

    python benchmarks/messages.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from infergap.messages import Message, catalog  # noqa: E402

LOUD = ("fatal", "error", "warn")
CODES = ("cuda", "nvml")
ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "tensorrt_llm")


def _explained(m: Message) -> bool:
    return m.curated or m.cls != "informational"


def row(name: str, header: dict, msgs: list[Message]) -> tuple[str, float | None, float | None]:
    """One printed line for a component, its coverage figure and its target (None: no target)."""
    loud = [m for m in msgs if m.level in LOUD]
    sites = header.get("call_sites", 0) or 0
    in_cat = sum(m.sites for m in loud)
    checked = sum(m.sites for m in loud if m.check)
    routed = sum(m.sites for m in loud if m.route)
    explained = sum(m.sites for m in loud if _explained(m))
    curated = sum(m.sites for m in loud if m.curated)
    up = header.get("upstream", {})
    tag = f"{up.get('repo', '?')}@{up.get('tag', '?')}"
    figure, target, what = None, None, "explained"
    if name in CODES:
        names = {m.name for m in msgs if m.name}
        matchable = {m.name for m in msgs if m.name and m.matchable}
        figure, target, what = len(matchable) / max(1, len(names)), 1.0, "codes matchable"
        sites = len(names)
    elif name == "nccl":  # the target is over WARN call sites (the result-code texts are not call sites)
        warn = [m for m in loud if m.level == "warn"]
        figure, target, what = sum(m.sites for m in warn if _explained(m)) / max(1, sites), 0.95, "WARN sites explained"
    elif name in ENGINES and header.get("topic_sites"):
        figure, target, what = header.get("kept_sites", 0) / header["topic_sites"], 0.80, "topic warnings kept"
    elif sites:
        figure = explained / sites
    line = (f"{name:18} {tag:42} sites {sites:5}  in catalog {in_cat:5}  to a check {checked:4} (routed {routed:4})  "
            f"explained only {in_cat - checked:5}  curated {curated:4}  explained {explained:5}")
    if figure is not None:
        line += f"  | {what} {figure:6.1%}" + (f" (target {target:.0%})" if target else "")
    return line, figure, target


def main() -> int:
    """Print one line per catalog and the verdict; 1 when a target is missed."""
    cat = catalog()
    missed = []
    for name in sorted(cat.headers):
        msgs = [m for m in cat.all_routed() if m.component == name]
        line, figure, target = row(name, cat.headers[name], msgs)
        print(line)
        if target is not None and figure is not None and figure < target:
            missed.append(name)
    print("targets met" if not missed else f"targets missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
