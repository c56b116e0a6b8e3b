"""Prompt token counts from the server's own tokenizer: ``POST /tokenize``.

llama.cpp's ``llama-server`` takes ``{"content": text, "add_special": false}`` and answers
``{"tokens": [...]}`` (tools/server/README.md, "POST /tokenize"); vLLM's OpenAI server takes
``{"prompt": text, "add_special_tokens": false}`` (``model`` optional) and answers ``{"count": n,
"tokens": [...]}`` (vllm/entrypoints/openai/protocol.py, TokenizeCompletionRequest and
TokenizeResponse). The form is found once with a probe; SGLang and others without the endpoint
give None, and the caller says that prompts are sized by words instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from infergap.httpsafe import RequestRefused, post_json

#: One /tokenize call: a prompt of a few thousand tokens answers in milliseconds on a local server.
TIMEOUT_S = 5.0
#: Bytes of one answer: the token ids of a 128k-token prompt as JSON are about 1 MB.
MAX_BYTES = 4 << 20
#: Calls of one run: synthetic sizing takes a handful per prompt; past this, words are used.
MAX_CALLS = 20_000

_FORMS: tuple[tuple[str, Callable[[str, str | None], dict[str, Any]]], ...] = (
    ("llama.cpp", lambda text, model: {"content": text, "add_special": False}),
    ("vLLM", lambda text, model: {"prompt": text, "add_special_tokens": False, **({"model": model} if model else {})}),
)


class ServerTokenizer:
    """``str -> int`` counting with the server's /tokenize (``form``: which request it takes).
    Counts are cached per text; a failed call, or one past :data:`MAX_CALLS`, counts the text's
    words instead and is tallied in ``failed`` so the run can say how many prompts that was."""

    def __init__(self, url: str, form: int, model: str | None, headers: Mapping[str, str]) -> None:
        self.url, self.form, self.model, self.headers = url, form, model, dict(headers)
        self.name = _FORMS[form][0]
        self.calls = 0
        self.failed = 0
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text in self._cache:
            return self._cache[text]
        n = _count(self.url, self.form, text, self.model, self.headers) if self.calls < MAX_CALLS else None
        self.calls += 1
        if n is None:
            self.failed += 1
            n = max(1, len(text.split()))
        self._cache[text] = n
        return n


def _count(url: str, form: int, text: str, model: str | None, headers: Mapping[str, str]) -> int | None:
    """Tokens of ``text`` by one /tokenize call in request form ``form``; None when it failed."""
    try:
        status, body = post_json(url, _FORMS[form][1](text, model), timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES, headers=headers)
        doc = json.loads(body) if status == 200 else None
    except (RequestRefused, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("count"), int) and doc["count"] >= 0:
        return doc["count"]
    toks = doc.get("tokens")
    return len(toks) if isinstance(toks, list) else None


def server_tokenizer(base_url: str, model: str | None = None, headers: Mapping[str, str] | None = None) -> ServerTokenizer | None:
    """A :class:`ServerTokenizer` for the server at ``base_url`` (an OpenAI base URL; a trailing
    ``/v1`` is dropped, /tokenize sits at the root), or None when neither request form answers
    a probe with a non-empty count (vLLM answers llama.cpp's form with no tokens)."""
    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    url = root + "/tokenize"
    probe = "the of and to in is was for on as"
    for form in range(len(_FORMS)):
        n = _count(url, form, probe, model, headers or {})
        if n:
            return ServerTokenizer(url, form, model, headers or {})
    return None
