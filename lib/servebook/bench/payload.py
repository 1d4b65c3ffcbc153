"""What a request says: the OpenAI-compatible body, its endpoint, and the fields that fix the output length."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ParameterError

__all__ = ["fixed_length_fields", "request_body", "endpoint", "bench_config"]


def fixed_length_fields(engine: str, max_tokens: int) -> dict:
    """Request fields that make ``engine`` generate exactly ``max_tokens`` tokens ({} when unknown)."""
    name = (engine or "").split("==")[0].strip().lower()
    if name in ("vllm", "sglang"):
        return {"ignore_eos": True, "min_tokens": int(max_tokens)}
    if name == "transformers":
        # transformers serve rejects ignore_eos/min_tokens (422) but accepts a whole GenerationConfig.
        return {"generation_config": json.dumps({"max_new_tokens": int(max_tokens), "min_new_tokens": int(max_tokens),
                                                 "do_sample": False})}
    return {}


def _body(api: str, model: str, prompt: str, max_tokens: int, engine: str, fixed_length: bool, extra: dict | None) -> dict:
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "stream": True, "temperature": 0.0}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    # vLLM/SGLang send usage only when asked; transformers serve accepts and ignores the field.
    body["stream_options"] = {"include_usage": True}
    if fixed_length:
        body.update(fixed_length_fields(engine, max_tokens))
    body.update(extra or {})
    return body


def _endpoint(api: str) -> str:
    if api not in ("chat", "completions"):
        raise ParameterError("api", api, "'completions' or 'chat'")
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def bench_config(engine: str, attention: str, label: str, api: str) -> dict:
    """The columns that name a benchmark configuration in every row."""
    return {"engine": engine, "attention": attention or "default", "label": label or f"{engine}/{attention or 'default'}", "api": api}


request_body, endpoint = _body, _endpoint
