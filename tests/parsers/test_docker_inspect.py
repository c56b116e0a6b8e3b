"""parsers/docker_inspect.py: docker inspect pastes from public reports."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize("prompt", ["$ docker container inspect algo\n", ""])
def test_a_whole_docker_inspect_is_read_although_its_part_starts_at_the_id_line(tmp_path, prompt) -> None:
    """``docker container inspect NAME`` prints ``[``, ``{`` and then ``"Id": …`` (the shape of
    the paste in oceanprotocol/ocean-node#1076): pasted without its prompt line, the part starts
    at the record's start line, the ``"Id"`` line, without the ``[`` and ``{`` above it."""
    request = '{"Driver": "nvidia", "Count": 0, "DeviceIDs": ["GPU-0"], "Capabilities": [["gpu"]], "Options": null}'
    paste = (prompt + "[\n    {\n"
             '        "Id": "ef0a01ecaeeb718b2154ce2e6c27667850c106d3a1ae39e2b5a13d9af2debfeb",\n'
             '        "Args": [\n            "main.py"\n        ],\n'
             '        "Name": "/algo",\n        "HostConfig": {\n            "ShmSize": 67108864,\n'
             f'            "DeviceRequests": [\n                {request}\n            ]\n        }}\n    }}\n]\n')
    f = tmp_path / "inspect.txt"
    f.write_text(paste)
    parts, unknown = scan_file(f)
    assert [p.kind for p in parts] == ["docker_inspect"] and not unknown
    (c,) = parse_docker_inspect(parts[0].text())
    assert c.name == "algo" and c.asks_for_gpus is True and c.shm_size_B == 67108864
    assert [(r.driver, r.device_ids) for r in c.requests] == [("nvidia", ["GPU-0"])]
