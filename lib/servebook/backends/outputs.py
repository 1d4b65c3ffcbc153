"""Chapter 03's output checks: does a forced backend give the default's tokens, as text and teacher-forced?

    texts = greedy_completions(url, model, PROBE_PROMPTS, max_tokens=32)       # greedy, one request per prompt
    row.update(compare_tokens(tokenizer, reference_texts, texts))              # share of equal tokens, first divergence
    row.update(teacher_forced_agreement(reference_lp, prompt_logprobs(url, model, texts)))   # top-1 over the same positions
    _disagrees(row)                                                            # wrong output, by the checks measured

The decode-path check (token ids in, token ids out) is ``agreement``; the verdict here weighs it first.
"""

from __future__ import annotations

from ..errors import ServebookError
from ._http import post_json as _post
from .agreement import MIN_AGREEMENT

# A fixed, seeded prompt set: the same for every backend and engine.
PROBE_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Attention backends differ in",
    "In 1969, the first",
]


def greedy_completions(base_url: str, model: str, prompts: list[str], max_tokens: int, timeout: float = 120) -> list[str]:
    """Greedy (temperature 0) completions, one request per prompt."""
    out = []
    for prompt in prompts:
        data = _post(f"{base_url}/v1/completions",
                     {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": False},
                     timeout)
        out.append(data["choices"][0]["text"])
    return out


def compare_tokens(tokenizer, reference: list[str], candidate: list[str]) -> dict:
    """Token agreement between two sets of completions and the first divergence."""
    total = same = 0
    first = None
    for i, (a, b) in enumerate(zip(reference, candidate)):
        ta, tb = tokenizer.encode(a, add_special_tokens=False), tokenizer.encode(b, add_special_tokens=False)
        n = max(len(ta), len(tb))
        total += n
        for j in range(n):
            if j < len(ta) and j < len(tb) and ta[j] == tb[j]:
                same += 1
            elif first is None:
                first = {"prompt": i, "token": j}
    return {"agreement": round(same / total, 4) if total else None, "first_divergence": first}


def prompt_logprobs(base_url: str, model: str, texts: list[str], timeout: float = 120) -> list[dict] | dict:
    """Per text, the engine's own log-probabilities of every prompt position (OpenAI completions with ``echo`` and
    ``logprobs: 1``, one new token): ``{"tokens": [...], "lp": [...], "top": [...]}`` where ``lp[i]`` is the
    log-probability of ``tokens[i]`` given the ones before and ``top[i]`` the engine's top-1 token there.
    An engine that does not return prompt log-probabilities gives ``{"unsupported": reason}``."""
    out = []
    for text in texts:
        try:
            data = _post(f"{base_url}/v1/completions", {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0.0,
                                                         "echo": True, "logprobs": 1, "stream": False}, timeout)
        except ServebookError as exc:
            if "HTTP 4" in str(exc):
                return {"unsupported": str(exc)[:300]}
            raise
        lp = (data.get("choices") or [{}])[0].get("logprobs") or {}
        tokens, lps, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not tokens or not lps or not tops or len(tokens) < 3:
            return {"unsupported": "the engine returned no prompt log-probabilities for echo + logprobs"}
        top1 = [max(t.items(), key=lambda kv: kv[1])[0] if isinstance(t, dict) and t else None for t in tops]
        out.append({"tokens": tokens[:-1], "lp": lps[:-1], "top": top1[:-1]})  # the last entry is the one new token
    return out


def teacher_forced_agreement(reference, candidate) -> dict:
    """Top-1 agreement and mean |log-prob difference| of two backends over the same teacher-forced positions.

    Tolerates near-ties of random weights where greedy matching does not: one flipped argmax changes every later
    greedy token, but only one teacher-forced position."""
    if not isinstance(candidate, list) or not isinstance(reference, list):
        why = (candidate or {}).get("unsupported") if isinstance(candidate, dict) else None
        return {"tf_top1_agreement": None, "tf_note": why or "no reference log-probabilities"}
    same = total = 0
    diffs = []
    for r, c in zip(reference, candidate):
        if r["tokens"] != c["tokens"]:
            continue  # tokenised differently: not comparable position by position
        for i in range(1, len(r["tokens"])):
            if r["top"][i] is None or c["top"][i] is None:
                continue
            total += 1
            same += r["top"][i] == c["top"][i]
            if r["lp"][i] is not None and c["lp"][i] is not None:
                diffs.append(abs(r["lp"][i] - c["lp"][i]))
    if not total:
        return {"tf_top1_agreement": None, "tf_note": "no comparable positions"}
    return {"tf_top1_agreement": round(same / total, 4), "tf_positions": total,
            "tf_logprob_mad": round(sum(diffs) / len(diffs), 5) if diffs else None}


def _disagrees(row: dict) -> bool:
    """Wrong output: decode agreement under ``agreement.MIN_AGREEMENT`` or teacher-forced (prefill) top-1 agreement
    under 90%, where measured; where neither was, greedy agreement under 50%."""
    dec, tf = row.get("decode_agreement"), row.get("tf_top1_agreement")
    if dec is not None or tf is not None:
        return (dec is not None and dec < MIN_AGREEMENT) or (tf is not None and tf < 0.9)
    return row.get("agreement") is not None and row["agreement"] < 0.5


def _disagreement(row: dict) -> str:
    dec = row.get("decode_agreement")
    if dec is not None and dec < MIN_AGREEMENT:
        first = row.get("decode_first_divergence") or {}
        return (f"decode agreement with the default backend is {dec:.0%} over {row['decode_positions']} decode positions "
                f"(tolerance {row['decode_tolerance']} nats); first difference: prompt {first.get('prompt')} position "
                f"{first.get('position')}, token {first.get('forced')} where the default decoded {first.get('default')}")
    if row.get("tf_top1_agreement") is not None:
        return (f"teacher-forced top-1 agreement with the default backend is {row['tf_top1_agreement']:.0%} over {row['tf_positions']} "
                f"positions (mean |log-prob difference| {row.get('tf_logprob_mad')})")
    return f"only {row['agreement']:.0%} of greedy tokens agree with the default backend"
