"""tools/messages/common.py: templates to bounded patterns, source call finders, classes, writing."""

from __future__ import annotations

import re
import time

import pytest
import yaml

from tools.messages import common as c


@pytest.mark.parametrize(("template", "style", "line", "caps"), [
    ("NET/IB : Got async event : %s", "printf", "h:1:2 [0] NCCL INFO NET/IB : Got async event : port error",
     {"a1": "port error"}),
    ("Found ulimit of %s and failed to automatically increase with error %s. This can cause fd limit "
     "errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n", "percent",
     "WARNING 05-01 10:00:00 [system_utils.py:1] Found ulimit of 20000 and failed to automatically "
     "increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
     "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n 65535",
     {"a1": "20000", "a2": "current limit exceeds maximum limit"}),
    ("Channel %02d : %d[%lx] -> %d[%lx] via P2P/%s%s", "printf",
     "Channel 03 : 0[1000] -> 1[2000] via P2P/IPC", {"a1": "03", "a2": "0", "a3": "1000", "a4": "1"}),
    ("Requested {num} blocks, {free:.2f} GiB free", "format", "Requested 12 blocks, 3.25 GiB free",
     {"num": "12", "free": "3.25"}),
    ("%(name)s usage is %(pct)d%% full", "percent", "shm usage is 93% full", {"pct": "93"}),  # a leading value is left out
    ("cudaMalloc failed: out of memory", "literal", "E cudaMalloc  failed: out of memory", {}),
])
def test_pattern_matches_real_shapes(template, style, line, caps):
    m = re.search(c.template_pattern(template, style), line)
    assert m, (template, line)
    assert set(caps) <= set(m.groupdict())
    for k, v in caps.items():
        assert m.group(k) == v


def test_pattern_refuses_other_text():
    rx = re.compile(c.template_pattern("NET/IB : No device found.", "printf"))
    assert rx.search("NET/IB : No device found.")
    assert not rx.search("NET/IB : Using device mlx5_0")
    assert not re.search(c.template_pattern("peer %d failed", "printf"), "peer x failed")


def test_slog_pattern_and_attrs():
    p = c.template_pattern("gpu VRAM usage didn't recover within timeout", "slog", ["seconds", "runner.size"])
    line = ('time=2025-01-01T00:00:00Z level=WARN source=sched.go:646 msg="gpu VRAM usage didn\'t recover '
            'within timeout" seconds=5.0 runner.size="3.2 GiB"')
    m = re.search(p, line)
    assert m and m.group("k_seconds") == "5.0" and m.group("k_runner_size") == '"3.2 GiB"'


def test_render_sample_roundtrip():
    for t, s in [("%s:%d -> %d via %s", "printf"), ("{} of {x!r} at {y:.1f}", "format"), ("a %r b", "percent")]:
        assert re.search(c.template_pattern(t, s), c.render_sample(t, s)), t


def test_multiline_template_matches_its_richest_line():
    t = "short\nThe NCCL transport failed to connect to peer %d\n"
    assert re.search(c.template_pattern(t), "The NCCL transport failed to connect to peer 3")


def test_patterns_are_linear_on_hostile_lines():
    t = "%s: %s: %s: %s failed %s: %s"
    rx = re.compile(c.template_pattern(t))
    hostile = (": " * (c.MAX_LINE // 2))[: c.MAX_LINE]
    t0 = time.perf_counter()
    rx.search(hostile)
    assert time.perf_counter() - t0 < 0.5


def test_unknown_style_is_refused():
    with pytest.raises(ValueError):
        c.template_pattern("x", "bogus")


@pytest.mark.parametrize(("text", "cls"), [
    ("NET/IB : No device found.", "network_fallback"),
    ("P2P is disabled between NVLINK connected GPUs", "p2p_refused"),
    ("Found ulimit of %s ... Too many open files", "limit"),
    ("CUDA driver version is insufficient for CUDA runtime version", "driver_cuda_mismatch"),
    ("No CUDA GPUs are available", "device_not_visible"),
    ("Watchdog caught collective operation timeout", "crash"),
    ("Falling back to the Triton attention backend", "backend_fallback"),
    ("Successfully loaded the model weights", "informational"),
])
def test_classify(text, cls):
    assert c.classify(text) == cls


def test_c_calls_and_strings():
    src = ('/* WARN("not me") */\nvoid f(){\n  WARN("NET/IB : %s:%d Got %" PRIu64 " bytes, %s", dev,\n'
           '       port, n, strerror(errno));\n  INFO(NCCL_NET, "x (%d)", g(a, b));\n}\n')
    calls = list(c.c_calls("net.cc", src, ["WARN", "INFO"]))
    assert [(k.func, k.line) for k in calls] == [("WARN", 3), ("INFO", 5)]
    assert c.c_string(calls[0].args[0]) == "NET/IB : %s:%d Got %lu bytes, %s"
    assert calls[1].args == ["NCCL_NET", '"x (%d)"', "g(a, b)"]
    assert c.c_string("msg") is None


def test_cpp_stream_template():
    assert c.cpp_stream_template('"Watchdog caught " << n << " ops {x}" << std::endl') == "Watchdog caught {} ops {{x}}"


def test_python_messages():
    src = ("import logging\nlogger = logging.getLogger(__name__)\n"
           "logger.warning('Found %s and %s', a, b)\n"
           "logger.info(f'Using {backend} for {n:.1f} s')\n"
           "warnings.warn('deprecated ' 'thing')\n"
           "raise RuntimeError(f'No GPU {i}')\n"
           "other.warning('not a logger %s', x)\n")
    got = [(m.line, m.level, m.template, m.style) for m in c.python_messages(src, raises=True)]
    assert (3, "warn", "Found %s and %s", "percent") in got
    assert (4, "info", "Using {backend} for {n:.1f} s", "format") in got
    assert (5, "warn", "deprecated thing", "literal") in got
    assert (6, "error", "No GPU {i}", "format") in got
    assert not any(m[0] == 7 for m in got)


def test_go_messages():
    src = ('package x\nfunc f() {\n\tslog.Warn("gpu VRAM usage didn\'t recover", "seconds", s, "gpu", id)\n'
           '\tklog.Warningf("Failed to get device %s: %v", d, err)\n}\n')
    got = list(c.go_messages("x.go", src))
    assert (got[0].style, got[0].attrs, got[0].level) == ("slog", ["seconds", "gpu"], "warn")
    assert (got[1].template, got[1].style, got[1].level) == ("Failed to get device %s: %v", "printf", "warn")


def test_curated_merge_and_write(tmp_path):
    taken: set[str] = set()
    es = [c.Entry(id=c.make_id("nccl", "net_ib", "NET/IB : No device found.", "printf", taken), level="warn",
                  template="NET/IB : No device found.", where="src/a.cc:1", cls="network_fallback"),
          c.Entry(id="x", level="error", template="NET/IB : No device found.", where="src/b.cc:9")]
    es = c.dedupe(es)
    assert len(es) == 1 and es[0].sites == 2 and es[0].level == "error" and es[0].also == ["src/b.cc:9"]
    cur = tmp_path / "cur.yaml"
    cur.write_text("nccl.net_ib.net_ib_no_device_found:\n  meaning: m\n  check: nccl.net\ngone.id:\n  meaning: z\n")
    missing = c.merge_curated(es, c.load_curated(cur), "NCCL")
    assert missing == ["gone.id"] and es[0].curated and es[0].check == "nccl.net"
    out = tmp_path / "m" / "nccl.yaml"
    c.write_catalog(out, {"component": "nccl", "call_sites": 2}, es)
    doc = yaml.safe_load(out.read_text())
    assert doc["messages"][0]["pattern"] == c.template_pattern("NET/IB : No device found.")
    assert doc["messages"][0]["sites"] == 2


def test_make_id_is_unique_and_stable():
    taken: set[str] = set()
    a = c.make_id("nccl", "p2p", "P2P disabled %d", "printf", taken)
    b = c.make_id("nccl", "p2p", "P2P disabled %s", "printf", taken)
    assert (a, b) == ("nccl.p2p.p2p_disabled", "nccl.p2p.p2p_disabled_2")
