"""The engine mining scripts, run on fixed excerpts of upstream source (tests/fixtures/upstream/)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools.messages import common as c
from tools.messages import engines

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "tests/fixtures/upstream"


def _mine(module, fixture: str, tag: str, tmp_path: Path, curated: Path | None = None) -> dict:
    out = tmp_path / "cat.yaml"
    co = c.Checkout(UP / fixture, tag)
    engines.build(module.ENGINE, co, out, curated or tmp_path / "none.yaml", archive="excerpt")
    return yaml.safe_load(out.read_text(encoding="utf-8"))


def _by_template(cat: dict) -> dict[str, dict]:
    return {" ".join(m["template"].split()): m for m in cat["messages"]}


def test_vllm_miner_on_excerpt(tmp_path):
    from tools.messages import mine_vllm

    cat = _mine(mine_vllm, "vllm", "v0.32.0", tmp_path, ROOT / "tools/messages/curated/vllm.yaml")
    assert cat["upstream"] == {"repo": "vllm-project/vllm", "tag": "v0.32.0", "archive": "excerpt"}
    # ulimit + 2 custom-allreduce warnings + model_class_overrides (off topic); the tool parser's
    # error is left out with its directory; 2 raises, both kept; 1 info kept.
    assert (cat["call_sites"], cat["topic_sites"], cat["kept_sites"]) == (4, 3, 3)
    assert (cat["raise_sites"], cat["kept_raise_sites"], cat["kept_info_sites"]) == (2, 2, 1)
    t = _by_template(cat)
    ul = t["Found ulimit of %s and failed to automatically increase with error %s. This can cause fd "
           "limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n"]
    assert ul["id"] == "vllm.system_utils.found_ulimit_failed_automatically_increase"
    assert ul["where"] == "vllm/utils/system_utils.py:17" and ul["level"] == "warn"
    assert (ul["check"], ul["severity"], ul["curated"]) == ("limits.nofile", "P2", True)
    kv = [m for k, m in t.items() if k.startswith("To serve at least one request")][0]
    assert kv["level"] == "error" and kv["style"] == "format" and kv["class"] == "memory_kv"
    line = ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV "
            "cache is needed, which is larger than the available KV cache memory (1.50 GiB). Based on the "
            "available memory, the estimated maximum model length is 12288. Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
            "`max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    m = re.search(kv["pattern"], line)
    assert m and m.group("max_model_len") == "32768"
    info = t["Custom allreduce is disabled because of missing custom allreduce library"]
    assert info["level"] == "info" and info["check"] == "allreduce.custom"
    assert not any("Mistral" in k or "model_class_overrides" in k for k in t)


def test_llamacpp_miner_on_excerpt(tmp_path):
    from tools.messages import mine_llamacpp

    cat = _mine(mine_llamacpp, "llamacpp", "llama-cpp-python-0.3.36", tmp_path,
                ROOT / "tools/messages/curated/llamacpp.yaml")
    # ggml-cuda.cu: 5 GGML_LOG_ERROR; arg.cpp: 3 fprintf(stderr) warnings; server: 2 SLT_WRN
    assert (cat["call_sites"], cat["topic_sites"], cat["kept_sites"], cat["kept_info_sites"]) == (10, 6, 6, 1)
    t = _by_template(cat)
    # GGML_CUDA_NAME between the literals is the CUDA build's "CUDA"
    init = t["%s: failed to initialize CUDA: %s"]
    assert init["id"] == "llamacpp.ggml_cuda.failed_initialize_cuda" and init["level"] == "error"
    assert init["check"] == "gpu.present" and init["curated"] is True
    m = re.search(init["pattern"], "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected")
    assert m and m.group("a2") == "no CUDA-capable device is detected"
    assert t["CUDA error: %s"]["level"] == "error"
    gpu = t["warning: no usable GPU found, --gpu-layers option will be ignored"]
    assert (gpu["level"], gpu["where"], gpu["check"]) == ("warn", "common/arg.cpp:4", "engine.offload")
    off = t["%s: offloaded %d/%d layers to GPU"]
    assert off["level"] == "info"
    m = re.search(off["pattern"], "llm_load_tensors: offloaded 0/33 layers to GPU")
    assert m and (m.group("a2"), m.group("a3")) == ("0", "33")
    # the slot's format is the second argument; PRId64 folds into the format
    assert not any(k.startswith("erasing old context checkpoint") for k in t)


def test_ollama_miner_on_excerpt(tmp_path):
    from tools.messages import mine_ollama

    cat = _mine(mine_ollama, "ollama", "v0.32.15", tmp_path, ROOT / "tools/messages/curated/ollama.yaml")
    # 3 slog.Warn + errors.New on topic, 1 slog.Warn off topic; slog.Debug is not read
    assert (cat["call_sites"], cat["topic_sites"], cat["kept_sites"], cat["kept_info_sites"]) == (5, 4, 4, 1)
    t = _by_template(cat)
    assert not any(k.startswith("gpu reported") or "context field" in k for k in t)
    ic = t["inference compute"]
    assert ic["style"] == "slog" and ic["attrs"][:3] == ["id", "filter_id", "library"]
    line = ('time=2025-07-01T17:59:51.470Z level=INFO source=types.go:60 msg="inference compute" id=cpu '
            'library=cpu compute="" name=cpu description=cpu libdirs=ollama driver="" pci_id="" type="" '
            'total="31.0 GiB" available="28.3 GiB"')
    m = re.search(ic["pattern"], line)
    assert m and m.group("k_library") == "cpu" and m.group("k_total") == '"31.0 GiB"'
    old = t["NVIDIA driver too old"]
    assert (old["check"], old["severity"], old["where"]) == ("driver.cuda_compat", "P1", "discover/cuda_compat.go:4")
    full = t["unable to load full model on GPU"]
    assert full["level"] == "error" and full["check"] == "engine.offload"
    assert t["predicted usage exceeds VRAM"]["class"] == "memory_kv"


def test_sglang_miner_on_excerpt(tmp_path):
    from tools.messages import mine_sglang

    cat = _mine(mine_sglang, "sglang", "v0.5.23", tmp_path, ROOT / "tools/messages/curated/sglang.yaml")
    assert (cat["call_sites"], cat["topic_sites"], cat["kept_sites"]) == (4, 4, 4)
    t = _by_template(cat)
    nofile = t["Fail to set RLIMIT_NOFILE: {e}"]
    assert (nofile["id"], nofile["check"], nofile["where"]) == (
        "sglang.common.fail_set_rlimit_nofile", "limits.nofile", "sglang/srt/utils/common.py:11")
    m = re.search(nofile["pattern"], "[2026-01-01 10:00:00] Fail to set RLIMIT_NOFILE: not allowed to raise maximum limit")
    assert m and m.group("e") == "not allowed to raise maximum limit"
    p2p = t["{cls_name} is disabled because your platform lacks GPU P2P capability or P2P test failed. "
            "To silence this warning, specify disable_custom_all_reduce=True explicitly."]
    assert p2p["check"] == "allreduce.custom" and p2p["class"] == "p2p_refused"
    m = re.search(p2p["pattern"], "[2026-01-01 TP0] CustomAllreduce is disabled because your platform lacks GPU P2P "
                                  "capability or P2P test failed. To silence this warning, specify "
                                  "disable_custom_all_reduce=True explicitly.")
    assert m and m.group(0).startswith("is disabled because your platform lacks GPU P2P")
    moe = [v for k, v in t.items() if k.startswith("Using default MoE kernel config")][0]
    assert moe["check"] == "engine.moe_config" and moe["style"] == "percent"


def test_tensorrt_llm_miner_on_excerpt(tmp_path):
    from tools.messages import mine_tensorrt_llm

    cat = _mine(mine_tensorrt_llm, "tensorrt_llm", "release/v0.7.1", tmp_path,
                ROOT / "tools/messages/curated/tensorrt_llm.yaml")
    # C++: one TLLM_CHECK_WITH_INFO and one TLLM_LOG_WARNING; Python: one raise
    assert (cat["call_sites"], cat["topic_sites"], cat["kept_sites"]) == (2, 2, 2)
    assert (cat["raise_sites"], cat["kept_raise_sites"]) == (1, 1)
    t = _by_template(cat)
    de = t["Failed to deserialize cuda engine"]
    assert (de["level"], de["where"], de["check"]) == ("error", "cpp/tensorrt_llm/runtime/tllmRuntime.cpp:3",
                                                       "runtime.versions")
    mb = t["Force using MultiBlockMode in MMHA as shared memory is not enough, MultiBlockMode may have "
           "different accuracy compared to non-MultiBlockMode."]
    line = ("[TensorRT-LLM][WARNING] Force using MultiBlockMode in MMHA as shared memory is not enough, "
            "MultiBlockMode may have different accuracy compared to non-MultiBlockMode.")
    assert mb["level"] == "warn" and re.search(mb["pattern"], line)
    kv = t["Can't allocate new block for KV cache"]
    assert (kv["level"], kv["check"], kv["severity"]) == ("error", "engine.kv_pressure", "P1")


def test_llamacpp_miner_unions_the_2023_release(tmp_path):
    """--also-tag: llama.cpp's 2023 layout (llama.cpp and ggml-cuda.cu at the top, no src/) mined
    beside the current release; a template both print is one entry naming both tags, one only the
    old release prints is added with its tag and its own path."""
    from tools.messages import mine_llamacpp

    out = tmp_path / "cat.yaml"
    new, old = c.Checkout(UP / "llamacpp", "llama-cpp-python-0.3.36"), c.Checkout(UP / "llamacpp-2023", "llama-cpp-python-0.1.77")
    engines.build(mine_llamacpp.ENGINE, new, out, ROOT / "tools/messages/curated/llamacpp.yaml", archive="excerpt",
                  also=[(old, "excerpt 2023")])
    cat = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert cat["upstream"]["also_tags"] == ["llama-cpp-python-0.1.77"] and cat["call_sites"] == 10  # the counts stay the current release's
    t = _by_template(cat)
    assert t["%s: offloaded %d/%d layers to GPU"]["tags"] == ["llama-cpp-python-0.3.36", "llama-cpp-python-0.1.77"]
    found = t["%s: found %d CUDA devices:"]
    assert found["tags"] == ["llama-cpp-python-0.1.77"] and found["where"] == "ggml-cuda.cu:18"
    assert t["%s: using CUDA for GPU acceleration"]["where"] == "llama.cpp:4"
    assert t["CUDA error %d at %s:%d: %s"]["tags"] == ["llama-cpp-python-0.1.77"]
    assert t["%s: failed to initialize CUDA: %s"]["tags"] == ["llama-cpp-python-0.3.36"]
    # a line of a 2023-format paste (https://github.com/ggml-org/llama.cpp/issues/5483)
    assert re.search(found["pattern"], "ggml_init_cublas: found 2 CUDA devices:")


def test_the_packaged_llamacpp_catalog_reads_2023_lines():
    """The packaged catalog, mined with --also-tag llama-cpp-python-0.1.77, reads the 2023 format's
    lines (https://github.com/ggml-org/llama.cpp/issues/5483) and names the release that prints them."""
    from infergap.messages import match_lines

    mm = match_lines(["ggml_init_cublas: found 2 CUDA devices:",
                      "llama_model_load_internal: offloaded 33/35 layers to GPU"])
    assert [(m.message.component, m.message.tag) for m in mm] == [
        ("llamacpp", "llama-cpp-python-0.1.77"), ("llamacpp", "llama-cpp-python-0.3.36")]
    assert mm[1].message.check == "engine.offload"
