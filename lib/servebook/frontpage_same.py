"""The front page's table "same configuration, other methods": one row per book and method that measured a configuration
the reference book also measured, and what makes each row differ from the reference's row of the same method.

    rows = same_configuration(summaries, reference="h200x1-trust")   # summaries: frontpage.book_summary(...) dicts
    html = table_html(rows, reference="h200x1-trust")

A configuration is an engine version's default launch (its own backend choice) on one model (the card's slice, by layer
count); its rates come from chapter 03 (the default backend forced as the engine picks it: decode tok/s of one generation
per run) and chapter 05 (the served single stream, chapter 05's client). Every figure is tagged as the book's pages tag it
(``default_tok_s`` of the engine, ``single_tok_s`` of the served label), so the consistency check reads each row against
its own book.
"""

from __future__ import annotations

import html

__all__ = ["configurations", "same_configuration", "table_html"]

METHODS = {"03": "chapter 03: the default backend's decode rate (tok/s of each generation, client-side)",
           "05": "chapter 05: served single stream (benchmark client, one request at a time)"}


def configurations(store, model: dict, machine: str, ran: dict) -> list[dict]:
    """This run's rows: per engine, its default's chapter 03 rate and its served chapter 05 rate (where measured).
    ``ran``: per chapter, its ``workload`` and ``weights`` (``frontpage._workload``); the workload column is the one the
    measurement's rows recorded (``findings.methods.workload_words``: chapter 03 generates twice its ``max_tokens``), the
    executed notebook's parameters only where no row recorded it."""
    from .findings import backends, throughput
    from .findings.methods import default_method, workload_words

    if not model.get("card"):
        return []
    base = {"model": f"{model['card']} {model.get('layers')}-layer slice", "weights": model.get("weights") or "?",
            "machine": machine}
    out = []
    for b in backends(store):
        if b.get("default_tok_s") is not None:
            out.append({**base, "engine": b["engine"], "version": str(b.get("version")), "method": "03",
                        "value": b["default_tok_s"], "ci95": b.get("default_ci95"), "starts": int(b.get("default_starts") or 1),
                        "backend": b.get("default_reported"),
                        "tokens": workload_words(default_method(store, b["engine"], "03")) or ran.get("03", {}).get("workload", ""),
                        "weights": ran.get("03", {}).get("weights") or base["weights"],
                        "tag": ("default_tok_s", "default_ci95", b["engine"])})
    versions = {b["engine"]: str(b.get("version")) for b in backends(store)}
    for t in throughput(store):
        if t.get("single_tok_s") is not None and t.get("attention") == "default" and t.get("engine") in versions:
            out.append({**base, "engine": t["engine"], "version": versions[t["engine"]], "method": "05",
                        "value": t["single_tok_s"], "ci95": t.get("single_ci95"), "starts": int(t.get("starts") or 1),
                        "backend": "default", "launch": t["label"],
                        "tokens": workload_words(default_method(store, t["engine"], "05", t["label"])) or ran.get("05", {}).get("workload", ""),
                        "weights": ran.get("05", {}).get("weights") or base["weights"],
                        "tag": ("single_tok_s", "single_ci95", t["label"])})
    return out


def same_configuration(summaries: list[dict], reference: str | None) -> list[dict]:
    """Every book's rows for a configuration the reference book measured, the reference's rows first; each row with
    ``differs``: what sets it apart from the reference's row of the same method (or "the reference" for those)."""
    ref = next((s for s in summaries if s["name"] == reference), None)
    if ref is None:
        return []
    keys = {(r["engine"], r["version"], r["model"]) for r in ref.get("configs", [])}
    refrow = {(r["engine"], r["version"], r["model"], r["method"]): r for r in ref.get("configs", [])}
    rows = []
    for s in [ref] + [s for s in summaries if s is not ref]:
        for r in s.get("configs", []):
            if (r["engine"], r["version"], r["model"]) not in keys:
                continue
            base = refrow.get((r["engine"], r["version"], r["model"], r["method"]))
            rows.append({**r, "book": s["name"], "differs": _differs(r, base, s is ref)})
    return sorted(rows, key=lambda r: (r["engine"], r["model"], r["method"], r["book"] != reference, r["book"]))


def _differs(r: dict, base: dict | None, is_ref: bool) -> str:
    if is_ref:  # the reference measured the configuration by two methods: each is its number for that method, not a second one
        return f"the reference (the number the front page quotes for chapter {r['method']}'s method)"
    if base is None:
        return "the reference did not measure it by this method"
    why = []
    if r["starts"] != base["starts"]:
        why.append(f"{_starts(r['starts'])} against the reference's {base['starts']}"
                   + ("; an interval within one start gives no verdict" if r["starts"] < 2 else ""))
    if r["weights"] != base["weights"]:
        why.append(f"{r['weights']} weights against {base['weights']}")
    if r["machine"] != base["machine"]:
        why.append(f"another machine: {r['machine']}")
    if r["tokens"] != base["tokens"]:
        why.append(f"workload {r['tokens'] or 'the chapter defaults'} against {base['tokens'] or 'the chapter defaults'}")
    if r.get("backend") != base.get("backend"):
        why.append(f"the default loaded {r.get('backend')} against {base.get('backend')}")
    if r.get("launch") and r.get("launch") != base.get("launch"):
        why.append(f"launched as <code>{html.escape(r['launch'])}</code>")
    return "; ".join(why) or "the same method and setup, another recording (another day and lent machine)"


def _flags(r: dict) -> str:
    """The launch flags a served row ran with beyond the engine's default backend (its label after the first word):
    the configuration is the default backend, not every default (e.g. a sampling backend set by hand)."""
    launch = str(r.get("launch") or "")
    flags = launch.split(" ", 1)[1].strip() if " " in launch else ""
    return f" backend, launched with <code>{html.escape(flags)}</code>" if flags else ""


def _starts(n: int) -> str:
    return "one server start" if n < 2 else f"{n} server starts"


def table_html(rows: list[dict], reference: str | None) -> str:
    """The table, or "" when no other book measured a configuration of the reference's."""
    from .stated import q

    if not rows or all(r["book"] == reference for r in rows):
        return ""
    e = html.escape
    body = []
    for r in rows:
        name, ci, of = r["tag"]
        body.append(f'<tr data-book="{e(r["book"])}"{" class=sb-ref" if r["book"] == reference else ""}>'
                    f'<td>{e(r["engine"])} {e(r["version"])} default{_flags(r)}, {e(r["model"])}</td>'
                    f'<td><a href="{e(r["book"])}/index.html">{e(r["book"])}</a></td><td>{e(METHODS[r["method"]])}</td>'
                    f'<td>{q(name, r["value"], ",.1f", of=of)} &plusmn; {q(ci, r["ci95"], ",.1f", of=of)}</td>'
                    f'<td>{e(_starts(r["starts"]))}</td><td>{e(r["weights"])}</td><td>{e(r["machine"])}</td>'
                    f'<td>{e(r["tokens"])}</td><td>{r["differs"]}</td></tr>')
    return ('<table class="sb-same"><thead><tr><th>configuration</th><th>book</th><th>method</th><th>tok/s &plusmn; 95% '
            '<a href="glossary.html#interval">interval</a></th><th>over</th><th>weights</th><th>machine</th><th>workload</th>'
            "<th>why it differs from the reference</th></tr></thead><tbody>" + "".join(body) + "</tbody></table>")
