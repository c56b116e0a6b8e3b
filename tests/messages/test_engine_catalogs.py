"""The serving-engine message catalogs (vLLM, SGLang, llama.cpp, ollama, TensorRT-LLM).

Every entry's pattern matches its own template rendered with sample values, real lines pasted in
the evidence corpus match the entry they come from, curated entries name existing checks, and the
header carries the counts the coverage benchmark prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tools.messages import common as c

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "src/infergap/data/messages"
EVIDENCE = ROOT / "tests/fixtures/evidence"
ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "tensorrt_llm")
PRESENT = [e for e in ENGINES if (DATA / f"{e}.yaml").is_file()]


def _catalog(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text(encoding="utf-8"))


def _check_ids() -> set[str]:
    doc = yaml.safe_load((ROOT / "src/infergap/data/checks.yaml").read_text(encoding="utf-8"))
    items = doc["checks"] if isinstance(doc, dict) and "checks" in doc else doc
    return {c["id"] for c in items}


@pytest.mark.parametrize("name", PRESENT)
def test_header_counts(name):
    cat = _catalog(name)
    assert cat["component"] == name
    assert cat["mined_by"] == f"tools/messages/mine_{name}.py"
    assert (ROOT / cat["mined_by"]).is_file()
    assert cat["upstream"]["repo"] and cat["upstream"]["tag"]
    assert 0 < cat["kept_sites"] <= cat["topic_sites"] <= cat["call_sites"]
    assert sum(cat["sites_by_level"].values()) == cat["call_sites"]
    loud = sum(m.get("sites", 1) for m in cat["messages"] if m["level"] != "info")
    assert loud >= cat["kept_sites"]
    # the coverage target of the issue: GPU/memory/communication warnings explained
    assert cat["kept_sites"] / cat["topic_sites"] >= 0.8


@pytest.mark.parametrize("name", PRESENT)
def test_every_pattern_matches_its_rendered_template(name):
    bad = []
    for m in _catalog(name)["messages"]:
        line = c.render_sample(m["template"], m.get("style", "printf"), m.get("attrs", ()))
        rx = re.compile(m["pattern"])
        if not rx.search("WARNING 01-01 00:00:00 [x.py:1] " + line):
            bad.append(m["id"])
        assert m["meaning"] and m["class"] in c.CLASSES and m["level"] in c.LEVELS
        assert re.fullmatch(r"[^:\s]+:\d+", m["where"]), m["where"]
    assert not bad, bad[:10]


@pytest.mark.parametrize("name", PRESENT)
def test_curated_entries_name_existing_checks(name):
    checks = _check_ids()
    cat = _catalog(name)
    curated = yaml.safe_load((ROOT / f"tools/messages/curated/{name}.yaml").read_text(encoding="utf-8"))
    ids = {m["id"]: m for m in cat["messages"]}
    assert set(curated) <= set(ids), sorted(set(curated) - set(ids))
    for key, val in curated.items():
        m = ids[key]
        assert m.get("curated") is True and m["meaning"] == val["meaning"]
        if val.get("check"):
            assert val["check"] in checks, (key, val["check"])
            assert m["check"] == val["check"]
        assert val.get("severity") in (None, "P0", "P1", "P2")


def test_ids_unique_across_engine_catalogs():
    seen: dict[str, str] = {}
    for name in PRESENT:
        for m in _catalog(name)["messages"]:
            assert m["id"].startswith(name + "."), m["id"]
            assert m["id"] not in seen, (m["id"], seen.get(m["id"]))
            seen[m["id"]] = name


# Real lines: (catalog, evidence file, a piece of the line, the entry it must match, captures).
REAL_LINES = [
    ("vllm", "vllm-4770-custom-ar-no-p2p.log", "Custom allreduce is disabled because your platform",
     "vllm.custom_all_reduce.custom_allreduce_disabled_because_your", {}),
    ("vllm", "vllm-17619-moe-default.log", "Using default MoE config",
     "vllm.fused_moe.using_default_moe_config_performance", {}),
    ("vllm", "vllm-17768-moe-ansi.log", "Using default MoE config",
     "vllm.fused_moe.using_default_moe_config_performance", {}),
    ("llamacpp", "llamacpp-6787-offload-none.log", "offloaded 0/33 layers to GPU",
     "llamacpp.llama_model.offloaded_layers_gpu", {"a2": "0", "a3": "33"}),
    ("llamacpp", "llmllamacpp-19-one-layer.log", "offloaded 1/35 layers",
     "llamacpp.llama_model.offloaded_layers_gpu", {"a2": "1", "a3": "35"}),
    ("llamacpp", "llamacpp-12171-offload-all.log", "offloaded 49/49 layers",
     "llamacpp.llama_model.offloaded_layers_gpu", {"a2": "49", "a3": "49"}),
    ("llamacpp", "llamacpp-12171-offload-all.log", "offloading 48 repeating layers to GPU",
     "llamacpp.llama_model.offloading_repeating_layers_gpu", {"a2": "48"}),
]


def _line_with(path: Path, piece: str) -> str:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if piece in line:
            return line
    raise AssertionError(f"{path.name}: no line with {piece!r}")


@pytest.mark.parametrize(("name", "fixture", "piece", "entry", "caps"), REAL_LINES)
def test_real_pasted_lines_match_their_entry(name, fixture, piece, entry, caps):
    if name not in PRESENT:
        pytest.skip(f"{name} catalog not written yet")
    ids = {m["id"]: m for m in _catalog(name)["messages"]}
    line = _line_with(EVIDENCE / fixture, piece)
    m = re.search(ids[entry]["pattern"], line[: c.MAX_LINE])
    assert m, (entry, line)
    for k, v in caps.items():
        assert m.group(k) == v


def test_vllm_ulimit_line_of_a_real_server_names_limits_nofile():
    """The line a vLLM 0.32 server printed on this project's CPU host (issue: the engine told us)."""
    line = ("(APIServer pid=4242) WARNING 11-30 20:01:12 [system_utils.py:255] Found ulimit of 20000 and "
            "failed to automatically increase with error current limit exceeds maximum limit. This can "
            "cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing "
            "with ulimit -n")
    ids = {m["id"]: m for m in _catalog("vllm")["messages"]}
    e = ids["vllm.system_utils.found_ulimit_failed_automatically_increase"]
    m = re.search(e["pattern"], line)
    assert m and m.group("a1") == "20000"
    assert (e["check"], e["severity"], e["class"]) == ("limits.nofile", "P2", "limit")


@pytest.mark.parametrize("name", PRESENT)
def test_patterns_are_linear_on_hostile_lines(name):
    """Every pattern on a long line that nearly matches: bounded time (atomic groups, no nesting)."""
    import time

    worst, who = 0.0, ""
    for m in _catalog(name)["messages"]:
        rx = re.compile(m["pattern"])
        sample = c.render_sample(m["template"], m.get("style", "printf"), m.get("attrs", ()))
        hostile = (sample[: len(sample) // 2] + " ") * (c.MAX_LINE // max(1, len(sample) // 2 + 1))
        t = time.perf_counter()
        rx.search(hostile[: c.MAX_LINE])
        dt = time.perf_counter() - t
        if dt > worst:
            worst, who = dt, m["id"]
    # catastrophic backtracking takes seconds to hours on 4096 characters; linear search takes
    # well under a millisecond, so half a second leaves room for a loaded machine
    assert worst < 0.5, (who, worst)


# Start-up refusals of the engine's configuration, as users pasted them (threads outside the
# first-sight rounds); each must reach engine.config at P0 and name the engines that print it.
CONFIG_REFUSALS = [
    # https://github.com/vllm-project/vllm/issues/2652 (vLLM 0.2, 52 heads on 8 GPUs)
    ("ValueError: Total number of attention heads (52) must be divisible by tensor parallel size (8).",
     "vllm.model.total_number_attention_heads_must", ("vllm",)),
    # https://github.com/vllm-project/vllm/issues/3036 (vLLM 0.3, the list cut as the comment shows it)
    ("ValueError: Model architectures ['GemmaForCausalLM'] are not supported for now. Supported architectures: "
     "['AquilaModel', 'AquilaForCausalLM', 'BaiChuanForCausalLM', 'BaichuanForCausalLM', 'BloomForCausalLM', "
     "'ChatGLMModel', 'ChatGLMForConditionalGeneration', 'FalconForCausalLM', 'GPT2LMHeadModel', "
     "'GPTBigCodeForCausalLM', 'GPTJForCausalLM', 'GPTNeoXForCausalLM', 'InternLMForCausalLM', "
     "'LlamaForCausalLM', 'LLaMAForCausalLM', 'MistralForCausalLM', 'MixtralForCausal",
     "registry.model_architectures_supported_now_supported", ("sglang", "vllm")),
    # https://github.com/vllm-project/vllm/issues/4327 (vLLM 0.4, FP8 on an sm_86 GPU)
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 90. "
     "Current capability: 86.", "quantization_method_supported_current_gpu", ("sglang", "vllm")),
    # https://github.com/vllm-project/vllm/issues/1282 (vLLM 0.2, AWQ on a T4, backticks of the title)
    ("`ValueError`: The quantization method awq is not supported for the current GPU. Minimum capability: 80. "
     "Current capability: 75.", "quantization_method_supported_current_gpu", ("sglang", "vllm")),
]


@pytest.mark.parametrize(("line", "entry", "components"), CONFIG_REFUSALS)
def test_engine_config_refusals_of_real_pastes_name_engine_config(line, entry, components):
    from infergap.messages import match_lines

    (m,) = match_lines([line])
    assert m.message.id.endswith(entry), m.message.id
    assert (m.message.check, m.message.severity) == ("engine.config", "P0")
    assert tuple(sorted((m.message.component, *m.alike))) == components


def test_raise_topic_keeps_the_configuration_refusals_it_names():
    """The selection rule itself, on the templates as vLLM 0.32 writes them (config/vllm.py,
    config/model.py, models/registry.py) and on one it must still leave out."""
    from tools.messages.engines import RAISE_TOPIC

    for t in ("The quantization method {} is not supported for the current GPU. Minimum capability: {}.",
              "Total number of attention heads ({n}) must be divisible by tensor parallel size ({tp}).",
              "Model architectures {architectures} are not supported for now. Supported architectures: {a}"):
        assert RAISE_TOPIC.search(t), t
    assert not RAISE_TOPIC.search("--enable-hc-sp is not supported for this model")
