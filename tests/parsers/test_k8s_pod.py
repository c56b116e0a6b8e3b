"""parsers/k8s_pod.py: kubectl describe pod from public reports."""

from __future__ import annotations

from infergap.parsers.k8s_pod import parse_describe_pod
from tests.parsers.inputs import lines


def test_a_pending_gpu_pod_gives_its_limits_mounts_and_volumes() -> None:
    """k8s-device-plugin#430: a Triton pod Pending with one nvidia.com/gpu limit (the prompt line left out)."""
    p = parse_describe_pod("\n".join(lines("k8sdp-430-describe-pod-pending.txt")[1:]))
    assert p.fields["Status"] == "Pending" and p.fields["Node"] == "<none>"
    (c,) = p.containers
    assert (c.name, c.image, c.gpus, c.requests) == ("triton-server", "triton_server:latest", 1, {"nvidia.com/gpu": "1"})
    assert c.mounts == {"/models": "model-repository", "/var/run/secrets/kubernetes.io/serviceaccount": "kube-api-access-sczwq"}
    assert p.volumes["model-repository"]["Type"].startswith("HostPath") and not p.events


def test_indented_paste_and_events() -> None:
    """k8s-device-plugin#33 pasted its describe output indented by two spaces; events are kept as messages."""
    p = parse_describe_pod("  Name:           xyz-v1-5c5b57cf9c-kvjxn\n  Status:         Pending\n  Containers:\n    aadhar:\n"
                           "      Limits:\n        cpu:             4\n        nvidia.com/gpu:  1\n  Events:\n"
                           "    Type     Reason            Age   From               Message\n    ----     ------            ----  ----               -------\n"
                           "    Warning  FailedScheduling  10h   default-scheduler  0/6 nodes are available: 6 Insufficient nvidia.com/gpu.\n")
    assert p.containers[0].limits == {"cpu": "4", "nvidia.com/gpu": "1"}
    assert p.events == ["Warning  FailedScheduling  10h   default-scheduler  0/6 nodes are available: 6 Insufficient nvidia.com/gpu."]
