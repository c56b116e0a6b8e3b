"""parsers/docker_inspect.py: docker inspect pastes from public reports."""

from __future__ import annotations

from pathlib import Path

from infergap.evidence.recognize import scan_file
from infergap.parsers.docker_inspect import parse_docker_inspect

EV = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def test_a_jq_filtered_device_request_list_is_read_as_the_containers_requests() -> None:
    """dockwatch#29: ``docker inspect plex | jq -r ".[].HostConfig.DeviceRequests"`` after a
    prompt: one request, nvidia driver, one GPU, the gpu capability."""
    parts, unknown = scan_file(EV / "docker-dockwatch29-device-requests.txt")
    assert [p.kind for p in parts] == ["docker_inspect"] and not unknown
    (c,) = parse_docker_inspect(parts[0].text())
    assert [(r.driver, r.count, r.device_ids, r.capabilities) for r in c.requests] == [("nvidia", 1, [], [["gpu"]])]
    assert c.asks_for_gpus is True and c.seen == ["DeviceRequests"] and c.shm_size_B is None


def test_text_without_a_container_yields_none() -> None:
    assert parse_docker_inspect("Error: No such object: plex") == []
    assert parse_docker_inspect('[{"Name": "/x"}]') == []
    assert parse_docker_inspect("[" * 5000) == []
