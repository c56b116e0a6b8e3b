"""parsers/ray_log.py and container.shm: Ray's object-store placement from public reports."""

from __future__ import annotations

from pathlib import Path

from infergap.findings import Status
from infergap.parsers.ray_log import is_ray_line, parse_ray_log
from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted, pasted_text, replaced
from tests.parsers.inputs import lines


def test_the_wrapped_fallback_warning_is_read() -> None:
    """open-instruct#1067: /dev/shm of 5 GiB, Ray's object store put on /tmp, 10.24 GB asked for."""
    f = parse_ray_log(lines("openinstruct-1067-ray-shm-5g.log"))
    assert (f.object_store_dir, f.shm_available_bytes, f.shm_size_hint_gb, f.ray_lines) == ("/tmp", 5368709120, 10.24, 1)
    assert not is_ray_line("time=2025-02-18T02:21:25.646Z level=INFO source=server.go:182 msg=x")


def test_container_shm_is_actionable_from_the_ray_log_alone() -> None:
    f = one(audit_ids(pasted("openinstruct-1067-ray-shm-5g.log"), "container"), "container.shm")
    assert f.status is Status.actionable and "5.00 GiB" in f.title
    assert f.evidence[0].source == "evidence/openinstruct-1067-ray-shm-5g.log"
    assert "--shm-size=10.24g" in f.remedy.note and not f.remedy.commands  # advice in words: no command line holds a pasted value


def test_a_ray_log_without_the_fallback_says_nothing_about_shm(tmp_path: Path) -> None:
    text = replaced(evidence_text("openinstruct-1067-ray-shm-5g.log"), "The object store is using /tmp instead", "View the Ray dashboard")
    f = one(audit_ids(pasted_text(tmp_path, "ray.log", text), "container"), "container.shm")
    assert f.status is Status.unknown
