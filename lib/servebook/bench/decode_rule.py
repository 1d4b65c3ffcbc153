"""Chapter 05's words on the rule that timed each decode rate, and the wait after the last token it leaves out.

    Markdown(say_decode_rule(store))   # the rule of this run's rows (each row's where two stand side by side), tagged,
                                       # and the starts of another rule set apart, each stated on its own

A decode rate runs from the read that carried a request's first token to the last read that carried tokens
(``sse.DECODE_TIMED_TO``); rows recorded before timed it to the stream's end (``sse.EARLIER_RULE``) and keep their
values. The wait between the two (``tail_s``) is stated per configuration (``figures.decode_tails``) either way. Starts
of one configuration timed by the two rules (a partial run of the earlier rule resumed) are never pooled into one
interval: the standing rule's starts make the configuration's interval, the others are stated apart (``runs.set_apart``).
"""

from __future__ import annotations

from .figures import decode_tails
from .runs import set_apart
from .sse import DECODE_TIMED_TO

__all__ = ["say_decode_rule"]

_NEW = ("Each request's decode is timed from the network read that carried its first token to the last read that carried "
        "tokens; the wait after that until its stream ended ([DONE] or a usage event, `tail_s`) counts in its end-to-end "
        "latency, not in its TPOT or decode rate.")
_OLD = ("timed to the stream's end: recorded before the client timed the decode to the last token, so the wait between a "
        "request's last token and its [DONE] is inside its TPOT and decode rate (its rows keep the values they were recorded "
        "with)")


def _rule(rules: list[str]) -> str:
    if rules == [DECODE_TIMED_TO]:
        return "timed to the last token"
    if DECODE_TIMED_TO in rules:
        return ("its rows were timed by both rules (to the last token, and to the stream's end before that rule), its single "
                "stream and its sweep each by one: no interval pools the two")
    return _OLD


def _bullet(t: dict, mixed: bool) -> str:
    from ..stated import q

    lab = t["label"]
    head = f"- {lab}: " + (f"{_rule(t['rules'])}; " if mixed else "")
    if t["tail_ms"] is None:
        return head + "no timed request to read the wait after its last token from."
    read = "" if t["rules"] == [DECODE_TIMED_TO] else ", read again from its requests' chunk gaps"
    return (head + f"the wait after the last token was {q('decode_tail_ms', t['tail_ms'], '.3g', of=lab)} ms (median{read}); the "
            f"rate timed to the last token is {q('decode_tail_rate_pct', t['rate_pct'], '+.2g', of=lab)}% over the rate timed to "
            "the stream's end.")


def say_decode_rule(store) -> str:
    """Markdown: which rule timed this run's decode rates, and per configuration the wait after its last token (tagged:
    ``decode_tail_ms``, ``decode_tail_rate_pct``). Where rows of both rules stand side by side, each configuration's
    bullet names its rule. Empty where no single stream was measured."""
    tails = decode_tails(store)
    if not tails:
        return ""
    rules = {r for t in tails for r in t["rules"]}
    if rules == {DECODE_TIMED_TO}:
        head = _NEW
    elif DECODE_TIMED_TO not in rules:
        head = f"This run's decode rates are {_OLD}."
    else:
        head = (f"Rows of two rules stand side by side here, each named below. {_NEW} Rows recorded before were {_OLD}.")
    return "\n".join([head, "", *(_bullet(t, len(rules) > 1) for t in tails), *_apart(store)])


def _apart(store) -> list[str]:
    """A bullet per configuration's starts of another method (decode rule) than its interval's: stated on their own."""
    from ..stated import q

    out = []
    for r in set_apart(store.rows("bench_summary")):
        of = f"{r['label']} | {r['decode_timed_to']}"
        out.append(f"- {r['label']}: {r['starts']} start(s) measured another way ({r['method']}) are set apart, not pooled "
                   f"into its interval: {q('set_apart_decode_tok_s', r['mean'], '.1f', of=of)} ± "
                   f"{q('set_apart_decode_ci95', r['ci95'], '.1f', of=of)} tok/s ({r['over']}).")
    return out
