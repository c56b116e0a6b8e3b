"""Write a random-weight Hugging Face model with a published architecture, for serving on a GPU
machine that cannot download anything (the real-GPU run behind docs/real-gpu/).

The architecture comes from the config files infergap ships for its roofline
(``src/infergap/data/models/<name>.json``), so the served model and the roofline describe the same
tensors. The tokenizer is a word-level vocabulary of exactly ``vocab_size`` entries (every id
decodes to a visible word, so streamed chunks are never empty), with a chat template. The rows of
``lm_head`` for the special tokens are zero, so greedy decoding never stops before ``max_tokens``.

Run: python benchmarks/real_gpu/make_random_model.py --model llama-3.1-8b --out /tmp/model
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b", help="name of a config in src/infergap/data/models/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=INT", help="override a config field (a smaller model for a dry run)")
    a = ap.parse_args()

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

    t0 = time.time()
    cfg_d = json.loads((ROOT / "src/infergap/data/models" / f"{a.model}.json").read_text())
    vocab_n = int(cfg_d["vocab_size"])
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for i in range(len(specials), vocab_n):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    ft = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>")
    ft.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    out = Path(a.out)
    ft.save_pretrained(out)

    cfg_d.update(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    for kv in a.set:
        k, _, v = kv.partition("=")
        cfg_d[k] = int(v)
    cfg = AutoConfig.for_model(**{k: v for k, v in cfg_d.items() if k != "architectures"})
    cfg.architectures = cfg_d.get("architectures")
    torch.manual_seed(0)
    with torch.device(a.device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight[:3] = 0
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2, do_sample=False)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {a.model}, {n / 1e9:.2f} B parameters, bf16, vocab {vocab_n}, in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
