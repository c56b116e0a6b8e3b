"""``audit --url`` and the startup log of a real vLLM 0.32 (CPU build): what it serves (``/version``,
``/v1/models``, ``/metrics`` with ``vllm:cache_config_info``, dev mode's ``/server_info``), what only
its log says (``non-default args``, the engine config line, ``CPU KV cache size``, its warnings),
and the two read together. Every expected value is read from the server or its log here, never
written from memory."""

from __future__ import annotations

import json
import re

import pytest
from vllm_support import STARVED_KV_BYTES, STARVED_MAX_LEN, VLLM_VERSION

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def _audit(s, *extra: str) -> list[dict]:
    r = run_cli("audit", "--url", s.url, "--no-host", "--evidence", str(s.log), "--format", "json", *extra, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)["findings"]


def _one(findings: list[dict], fid: str) -> dict:
    hits = [f for f in findings if f["id"] == fid]
    assert len(hits) == 1, (fid, [f["id"] for f in findings])
    return hits[0]


def _kv_line(log: str) -> tuple[int, float]:
    """(tokens, concurrency) of vLLM's ``CPU KV cache size: N tokens, Maximum concurrency …: Xx``."""
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", log)
    assert m, "no KV cache size line in the log"
    return int(m.group(1).replace(",", "")), float(m.group(2))


def test_audit_url_reads_version_model_limits_and_cache(vllm_limited):
    s = vllm_limited
    card = s.json("/v1/models")["data"][0]
    info = next(ln for ln in s.get("/metrics").decode().splitlines() if ln.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    kv_tokens, _ = _kv_line(s.log.read_text(errors="replace"))
    cfg = _one(_audit(s), "server.config")
    d, src = cfg["details"], cfg["details"]["sources"]
    assert cfg["status"] == "ok" and (d["engine"], d["version"]) == ("vllm", VLLM_VERSION) == ("vllm", s.json("/version")["version"])
    assert d["served_model_name"] == card["id"] == str(s.model) and src["served_model_name"] == "GET /v1/models"
    assert d["context_length"] == card["max_model_len"] == 2048 and src["context_length"] == "GET /v1/models"
    # the KV cache: /metrics' cache_config_info against the startup log's own line
    assert d["kv_tokens"] == int(labels["num_gpu_blocks"]) * int(labels["block_size"]) == kv_tokens
    assert d["kv_cache_bytes"] == int(labels["kv_cache_memory_bytes"]) == 2**30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB)
    assert d["enable_prefix_caching"] is True and src["enable_prefix_caching"] == "GET /metrics"
    # what vLLM serves only in dev mode comes from the same server's startup log
    log = "evidence/" + s.log.name
    assert (d["max_running_requests"], src["max_running_requests"]) == (2, log)
    assert (d["enable_chunked_prefill"], src["enable_chunked_prefill"]) == (True, log)
    assert d["device"] == "cpu"
    shown = {e["value"] for e in cfg["evidence"]}
    assert {"max_running_requests=2", "enable_prefix_caching=True", f"kv_tokens={kv_tokens}", "context_length=2048"} <= shown


def test_dev_mode_server_info_gives_the_scheduler_settings(vllm_starved):
    """With ``VLLM_SERVER_DEV_MODE=1`` vLLM serves its whole config; ``config_format=json`` gives it
    as sections, so max-num-seqs, the token budget and chunked prefill come from the server itself."""
    from infergap.server import introspect

    s = vllm_starved
    # the first answer runs vLLM's collect_env (seconds of subprocesses); it is cached after that
    vc = s.json("/server_info?config_format=json", timeout=300)["vllm_config"]
    sched, cache = vc["scheduler_config"], vc["cache_config"]
    cfg = introspect(s.url, timeout_s=30)
    assert cfg.errors == [] and cfg.engine == "vllm" and cfg.version == VLLM_VERSION
    assert cfg.max_running_requests == sched["max_num_seqs"] == 8 and cfg.sources["max_running_requests"] == "GET /server_info"
    assert cfg.max_batched_tokens == sched["max_num_batched_tokens"] and cfg.enable_chunked_prefill == sched["enable_chunked_prefill"]
    assert cfg.enable_prefix_caching is False is cache["enable_prefix_caching"]
    assert cfg.kv_cache_bytes == STARVED_KV_BYTES == cache["kv_cache_memory_bytes"]
    assert cfg.context_length == STARVED_MAX_LEN and cfg.device == "cpu"
    assert cfg.kv_tokens == _kv_line(s.log.read_text(errors="replace"))[0]


def test_the_startup_log_is_read_as_vllm_evidence(vllm_limited):
    from infergap.evidence.recognize import scan_file
    from infergap.parsers.engine_log import parse_engine_log

    s = vllm_limited
    text = s.log.read_text(errors="replace")
    parts, _ = scan_file(s.log)
    assert parts and parts[0].kind == "vllm_log"
    f = parse_engine_log(text.splitlines())
    kv_tokens, conc = _kv_line(text)
    assert (f.engine, f.version) == ("vllm", VLLM_VERSION)  # from the logo's version line and the engine config line
    assert f.args["max_num_seqs"] == 2 and f.args["max_model_len"] == 2048  # non-default args
    assert f.args["enable_prefix_caching"] is True and f.args["device_config"] == "cpu"  # the engine config line
    assert (f.kv_tokens, f.max_concurrency) == (kv_tokens, conc)
    findings = _audit(s)
    ec = _one(findings, "engine.config")
    assert ec["status"] == "ok" and ec["title"].startswith(f"vLLM {VLLM_VERSION}")
    assert {"max_num_seqs=2", f"kv_cache_tokens={kv_tokens}"} <= {e["value"] for e in ec["evidence"]}
    # the version the log states is checked against the known-bad vLLM versions before it is ok
    rv = _one(findings, "runtime.versions")
    assert rv["status"] == "ok" and rv["title"].startswith(f"vLLM {VLLM_VERSION}: checked against"), rv
    assert {"source": "evidence/" + s.log.name, "value": f"vLLM {VLLM_VERSION}"} in rv["evidence"]


def test_enforce_eager_on_the_cpu_build_is_no_cuda_graph_finding(vllm_starved):
    """``--enforce-eager`` on vLLM's CPU build: there are no CUDA graphs to lose, so neither the log
    check nor the plan says they are disabled."""
    s = vllm_starved
    assert "enforce_eager=True" in s.log.read_text(errors="replace") and "device_config=cpu" in s.log.read_text(errors="replace")
    findings = _audit(s)
    assert not [f for f in findings if f["id"] in ("engine.cuda_graph", "server.cuda_graph_max_bs")], findings


def test_the_ulimit_warning_joins_the_hosts_open_files_limit(vllm_limited):
    """vLLM raises its own open-file limit at start and warns when it cannot; the audit of the host
    with that log names the line in the host's own limits.nofile finding, beside the limit it read."""
    s = vllm_limited
    m = re.search(r"Found ulimit of (\d+) and failed to automatically increase", s.log.read_text(errors="replace"))
    if m is None:
        pytest.skip("this host let vLLM raise its open-file limit, so it logged no ulimit warning")
    r = run_cli("audit", "--url", s.url, "--evidence", str(s.log), "--format", "json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    findings = json.loads(r.stdout)["findings"]
    nofile = _one(findings, "limits.nofile")
    values = [e["value"] for e in nofile["evidence"]]
    assert nofile["status"] == "actionable" and nofile["severity"] == "P2", nofile
    assert m.group(1) in values and any(f"Found ulimit of {m.group(1)}" in v for v in values), values
    assert not [f for f in findings if f["id"] == "evidence.unmatched" and "ulimit" in f["title"]]  # joined, not "no known cause"
