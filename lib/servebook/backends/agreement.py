"""Chapter 03: does a forced backend's *decode kernel* give the default backend's tokens? Token ids in, token ids out.

    ids = prompt_ids(tokenizer, PROBE_PROMPTS)
    ref = reference_decodes("vllm", url, model, ids, max_tokens=32)        # the default backend: greedy, top-k per step
    row.update(decode_agreement("vllm", url2, model, ids, ref))           # a forced backend, against it

Both backends get the same prompt *token ids* and answer with token ids (never text that is tokenized again). The
forced backend decodes greedily; at each position its token is compared with the default's at the same prefix: equal
to the default's top-1, or within ``TOLERANCE`` nats of it in the default's own top-``TOP_K`` (a near-tie of random
weights), it agrees. Where the two differ, the rest of that request no longer shares the default's prefix, so the
forced backend is asked again from the prompt plus the default's tokens up to and including that position (re-anchored,
at most ``MAX_RESTARTS`` times per prompt): every compared position has exactly the default's context.

The first token of every request comes from the engine's prefill (the forward pass over the prompt); only the tokens
after it come from the decode kernel. ``decode_agreement`` counts those decode positions only; the first tokens are
counted apart (``decode_prefill_positions``).

Request formats, one per engine (``REQUESTS``):

- vLLM: ``POST /v1/completions`` with ``prompt`` a list of ids, ``logprobs: k``, ``return_tokens_as_token_ids``
  (top-k keys ``"token_id:123"``) and ``return_token_ids`` (the output ids).
- SGLang: its native ``POST /generate`` with ``input_ids``, ``return_logprob``, ``top_logprobs_num: k``:
  ``meta_info.output_token_logprobs`` / ``output_top_logprobs`` are ``[logprob, token_id, text]`` triples (its OpenAI
  completions key the top-k by text, which loses the ids).
- transformers serve: it takes only text prompts and returns no log-probabilities, so servebook's launcher adds
  ``POST /servebook/decode`` to the same server (``engines/launchers/transformers_serve.py``): the served model's
  own ``generate`` (the server's generation config and inference thread) from ``input_ids``, with its per-step logits.
- any other engine: the vLLM format.
"""

from __future__ import annotations

from typing import Callable

from ..errors import ServebookError
from ._http import post_json

__all__ = ["TOLERANCE", "TOP_K", "MIN_AGREEMENT", "MAX_RESTARTS", "REQUESTS", "prompt_ids", "decode", "reference_decodes",
           "decode_agreement", "compare_decodes", "DecodeUnsupported"]

TOLERANCE = 0.1  # nats: a forced token this close to the default's top-1 (in the default's top-k) is a near-tie, not an error
TOP_K = 20  # top log-probabilities asked per decode step (vLLM's default --max-logprobs)
MIN_AGREEMENT = 0.9  # under this share of decode positions, the forced backend's output is wrong
MAX_RESTARTS = 8  # re-anchored requests per prompt after the first; the prompt's later positions are not compared beyond

REQUESTS = {
    "vllm": "POST /v1/completions {prompt: [token ids], temperature: 0, logprobs: k, return_tokens_as_token_ids, return_token_ids, ignore_eos}",
    "sglang": "POST /generate {input_ids, sampling_params: {temperature: 0, max_new_tokens, ignore_eos}, return_logprob, top_logprobs_num: k}",
    "transformers": "POST /servebook/decode {input_ids, max_tokens, top_logprobs: k} (servebook's launcher: the served model's own generate)",
}


class DecodeUnsupported(ServebookError):
    """The server does not answer a token-id decode request with log-probabilities."""


def prompt_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    """The prompts as the token ids every backend is sent (the tokenizer's own special tokens included)."""
    return [list(tokenizer(p)["input_ids"]) for p in prompts]


_UNSUPPORTED = (400, 404, 405, 422, 501)  # statuses that mean "this server has no such request", not a failure of it


def _post(url: str, body: dict, timeout: float) -> dict:
    return post_json(url, body, timeout,
                     lambda code, message: (DecodeUnsupported if code in _UNSUPPORTED else ServebookError)(message))


def _token_id(key) -> int:
    """vLLM's "token_id:123" (``return_tokens_as_token_ids``) as 123."""
    s = str(key)
    if not s.startswith("token_id:"):
        raise DecodeUnsupported(f"top-k key {s!r} is not a token id: the server ignored return_tokens_as_token_ids")
    return int(s.split(":", 1)[1])


def _vllm(base_url: str, model: str, ids: list[int], n: int, k: int, timeout: float) -> dict:
    data = _post(f"{base_url}/v1/completions", {
        "model": model, "prompt": ids, "max_tokens": n, "temperature": 0.0, "logprobs": k, "stream": False,
        "return_tokens_as_token_ids": True, "return_token_ids": True, "ignore_eos": True}, timeout)
    choice = (data.get("choices") or [{}])[0]
    lp = choice.get("logprobs") or {}
    tokens, tops = lp.get("tokens"), lp.get("top_logprobs")
    if not tokens or not tops:
        raise DecodeUnsupported("the completion carried no per-token log-probabilities")
    out_ids = choice.get("token_ids") or [_token_id(t) for t in tokens]
    return {"ids": [int(t) for t in out_ids], "lp": list(lp.get("token_logprobs") or []),
            "top": [sorted(([_token_id(t), float(v)] for t, v in (s or {}).items()), key=lambda x: -x[1]) for s in tops]}


def _sglang(base_url: str, model: str, ids: list[int], n: int, k: int, timeout: float) -> dict:
    data = _post(f"{base_url}/generate", {
        "input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True},
        "return_logprob": True, "top_logprobs_num": k, "logprob_start_len": -1, "return_text_in_logprobs": False}, timeout)
    if isinstance(data, list):
        data = data[0]
    meta = data.get("meta_info") or {}
    toks, tops = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
    if not toks or not tops:
        raise DecodeUnsupported("/generate returned no output_token_logprobs / output_top_logprobs")
    return {"ids": [int(t[1]) for t in toks], "lp": [t[0] for t in toks],
            "top": [sorted(([int(t[1]), float(t[0])] for t in (s or [])), key=lambda x: -x[1]) for s in tops]}


def _transformers(base_url: str, model: str, ids: list[int], n: int, k: int, timeout: float) -> dict:
    data = _post(f"{base_url}/servebook/decode", {"model": model, "input_ids": ids, "max_tokens": n, "top_logprobs": k}, timeout)
    return {"ids": [int(t) for t in data["token_ids"]], "lp": data["token_logprobs"],
            "top": [[[int(i), float(v)] for i, v in s] for s in data["top_logprobs"]]}


_FORMATS: dict[str, Callable] = {"vllm": _vllm, "sglang": _sglang, "transformers": _transformers}


def decode(engine: str, base_url: str, model: str, ids: list[int], max_tokens: int, top_k: int = TOP_K, timeout: float = 120) -> dict:
    """One greedy decode from ``ids``: ``{"ids": [...], "lp": [...], "top": [[[id, logprob], ...] per step]}``.

    ``engine`` picks the request format (``REQUESTS``); ``DecodeUnsupported`` when the server does not answer it."""
    return _FORMATS.get(engine, _vllm)(base_url, model, list(ids), int(max_tokens), int(top_k), timeout)


def reference_decodes(engine: str, base_url: str, model: str, prompts: list[list[int]], max_tokens: int,
                      top_k: int = TOP_K, timeout: float = 120) -> list[dict] | dict:
    """The default backend's greedy decode of each prompt, with its top-k per step; ``{"unsupported": why}`` where the
    engine does not answer the request."""
    try:
        return [decode(engine, base_url, model, p, max_tokens, top_k, timeout) for p in prompts]
    except DecodeUnsupported as exc:
        return {"unsupported": str(exc)[:300]}


def decode_agreement(engine: str, base_url: str, model: str, prompts: list[list[int]], reference, *,
                     tolerance: float = TOLERANCE, top_k: int = TOP_K, max_restarts: int = MAX_RESTARTS, timeout: float = 120) -> dict:
    """A forced backend's greedy decode against ``reference`` (``reference_decodes`` of the default), position by
    position at the default's prefix; the fields chapter 03 records (``decode_agreement``, ``decode_positions``,
    ``decode_tolerance`` ...)."""
    if not isinstance(reference, list):
        why = (reference or {}).get("unsupported") if isinstance(reference, dict) else None
        return {"decode_agreement": None, "decode_note": why or "no reference decode of the default backend"}
    try:
        return compare_decodes(reference, prompts,
                               lambda ids, n: decode(engine, base_url, model, ids, n, top_k, timeout),
                               tolerance=tolerance, max_restarts=max_restarts,
                               path=REQUESTS.get(engine, REQUESTS["vllm"]))
    except DecodeUnsupported as exc:
        return {"decode_agreement": None, "decode_note": str(exc)[:300]}


def _lp_of(top: list, token: int):
    return next((lp for i, lp in top if i == token), None)


def compare_decodes(reference: list[dict], prompts: list[list[int]], decode_fn: Callable[[list[int], int], dict], *,
                    tolerance: float = TOLERANCE, max_restarts: int = MAX_RESTARTS, path: str = "") -> dict:
    """The comparison itself, for any ``decode_fn(ids, n) -> {"ids", "lp", "top"}`` (a server, or a stub).

    At position j of prompt p the forced token ``t`` is compared with the default's top-1 ``r`` there: equal, or
    ``lp_default(r) - lp_default(t) <= tolerance`` with ``t`` in the default's top-k, counts as agreeing. After any
    difference the forced backend is re-anchored on the default's tokens up to j (a new request). A forced token outside
    the default's top-k where even the k-th is within the tolerance cannot be judged: it is counted apart
    (``decode_unresolved``) and in neither share."""
    tally = _Tally(tolerance)
    for p, (ids, ref) in enumerate(zip(prompts, reference)):
        _one_prompt(tally, p, ids, ref, decode_fn, max_restarts)
    share = round(tally.decode_ok / tally.decode_pos, 4) if tally.decode_pos else None
    return {
        "decode_agreement": share,
        "decode_positions": tally.decode_pos,
        "decode_tolerance": tolerance,
        "decode_near_ties": tally.near,
        "decode_unresolved": tally.undecided,
        "decode_first_divergence": tally.first,
        "decode_logprob_mad": round(sum(tally.diffs) / len(tally.diffs), 5) if tally.diffs else None,
        "decode_prefill_positions": tally.prefill_pos,
        "decode_prefill_agreement": round(tally.prefill_ok / tally.prefill_pos, 4) if tally.prefill_pos else None,
        "decode_requests": tally.requests,
        "decode_path": ("greedy decode from the same prompt token ids; each decode-step token compared with the default's "
                        "at the same prefix (re-anchored on the default's tokens after a difference); " + path).strip("; "),
        "decode_per_prompt": tally.per_prompt,
        **({"decode_note": "no decode positions: every request stopped at its first (prefill) token"} if not tally.decode_pos else {}),
    }


class _Tally:
    """What ``compare_decodes`` counts over every prompt."""

    def __init__(self, tolerance: float):
        self.tolerance = tolerance
        self.decode_pos = self.decode_ok = self.near = self.undecided = self.prefill_pos = self.prefill_ok = self.requests = 0
        self.diffs: list[float] = []
        self.first: dict | None = None
        self.per_prompt: list[dict] = []


def _one_prompt(tally: _Tally, p: int, ids: list[int], ref: dict, decode_fn: Callable, max_restarts: int) -> None:
    """Prompt ``p`` decoded by the forced backend from the start, and again from the default's tokens after each
    difference (at most ``max_restarts`` times)."""
    n = len(ref["ids"])
    pos, restarts, diverged = 0, 0, []
    while pos < n:
        if restarts > max_restarts:
            break
        out = decode_fn(list(ids) + list(ref["ids"][:pos]), n - pos)
        tally.requests += 1
        nxt = _one_request(tally, p, ref, out, pos, diverged)
        if nxt <= pos:
            break
        if nxt < n:
            restarts += 1
        pos = nxt
    tally.per_prompt.append({"prompt": p, "length": n, "restarts": restarts, "differences": diverged[:8],
                             "compared_to": pos if pos < n else n})


def _one_request(tally: _Tally, p: int, ref: dict, out: dict, pos: int, diverged: list) -> int:
    """One answer (from position ``pos`` on) compared token by token up to its first difference; the position the next
    request starts from (the prompt's length where none differed)."""
    n = len(ref["ids"])
    for i, t in enumerate(out["ids"][: n - pos]):
        j = pos + i
        r, top = ref["ids"][j], ref["top"][j] if j < len(ref["top"]) else []
        same = t == r
        ok, unresolved, gap = _judge(t, r, top, ref, j, tally.tolerance)
        if not same and i > 0:
            tally.near += ok
            tally.undecided += unresolved
            diverged.append({"position": j, "forced": t, "default": r, "gap": gap})
        if unresolved:
            pass  # counted apart (decode_unresolved), in neither share
        elif i == 0:  # from the prefill of this request
            tally.prefill_pos += 1
            tally.prefill_ok += ok
        else:  # from the decode kernel
            _count_decode(tally, p, i, j, t, r, top, out, ref, ok, same)
        if not same:
            return j + 1
    return n


def _judge(t: int, r: int, top: list, ref: dict, j: int, tolerance: float) -> tuple[bool, bool, float | None]:
    """Forced token ``t`` against the default's ``r`` at position ``j``: (agrees, cannot be judged, log-prob gap)."""
    if t == r:
        return True, False, None
    lr, lt = _lp_of(top, r), _lp_of(top, t)
    if lr is None and ref["lp"][j] is not None:
        lr = ref["lp"][j]
    ok = lr is not None and lt is not None and lr - lt <= tolerance
    # not in the default's top-k, whose last entry is itself within the tolerance: the top-k cannot tell
    unresolved = lt is None and lr is not None and bool(top) and lr - min(v for _, v in top) <= tolerance
    return ok, unresolved, round(lr - lt, 5) if lr is not None and lt is not None else None


def _count_decode(tally: _Tally, p: int, i: int, j: int, t: int, r: int, top: list, out: dict, ref: dict, ok: bool,
                  same: bool) -> None:
    """A decode-step position counted: its agreement, the log-prob difference where the tokens are equal, the first miss."""
    tally.decode_pos += 1
    tally.decode_ok += ok
    if same and i < len(out.get("lp") or []) and out["lp"][i] is not None and ref["lp"][j] is not None:
        tally.diffs.append(abs(out["lp"][i] - ref["lp"][j]))
    if not ok and tally.first is None:
        tally.first = {"prompt": p, "position": j, "forced": t, "default": r, "default_top": top[:3]}
