"""Correct rows of a recorded table, saying on each row what was changed, by this tool, and why.

A recorded table is changed after the fact only through a tool here, so that the page that shows the row can say so
(``servebook.results.show_corrections``: "corrected: N rows of `backends`, `ok`, `harness_fault` set, by
tools/corrections/mark_rows.py (why)"). Each changed row gets the field ``corrected``:
``{"by": "tools/corrections/mark_rows.py", "fields": [...], "reason": "...", "at": "..."}``.

    python tools/corrections/mark_rows.py RUN TABLE --where engine=vllm --where attention=FLASHINFER_MLA \
        --set ok=null --set harness_fault=true --reason "servebook's preflight ran outside vLLM's config context"
    python tools/corrections/mark_rows.py RUN backends --from-run OTHER_RUN --where attention=auto \
        --reason "device.sh named the run wrongly; same machine and code"     # rows of OTHER_RUN's table appended here

A row that is not this run's (read on another machine, say) is withdrawn: ``--set withdrawn=true`` keeps it in the table,
stamped, and every reader of the run leaves it out (``RunStore.rows``; ``withdrawn=True`` reads it too).

Values are JSON (``null``, ``true``, ``12.5``, ``"text"``); anything not JSON is a string. Rows that already carry the
same correction are left alone (running it twice changes nothing). Prints what it changed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

TOOL = "tools/corrections/mark_rows.py"


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str], what: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"{what} {item!r}: write FIELD=VALUE")
        k, v = item.split("=", 1)
        out[k] = _value(v)
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def correct(run: Path, table: str, where: dict, values: dict, reason: str, from_run: Path | None = None) -> dict:
    """Set ``values`` on the rows of ``run/table.jsonl`` matching ``where`` (or append the matching rows of
    ``from_run``'s table), each stamped ``corrected``. Returns what changed."""
    if not reason.strip():
        raise SystemExit("--reason is required: the page shows it beside the corrected rows")
    path = run / f"{table}.jsonl"
    rows = _rows(path)
    match = lambda r: all(r.get(k) == v for k, v in where.items())  # noqa: E731
    at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    changed = 0
    if from_run is not None:
        stamp = {"by": TOOL, "what": f"moved from run {from_run.name}", "fields": [], "reason": reason}
        have = {json.dumps({k: v for k, v in r.items() if k != "corrected"}, sort_keys=True) for r in rows}
        for r in _rows(from_run / f"{table}.jsonl"):
            if match(r) and json.dumps({**r, **values}, sort_keys=True) not in have:
                rows.append({**r, **values, "corrected": {**stamp, "at": at}})
                changed += 1
    else:
        for r in rows:
            if not match(r):
                continue
            stamp = {"by": TOOL, "fields": sorted(values), "reason": reason}
            old = r.get("corrected") or {}
            if all(r.get(k) == v for k, v in values.items()) and {k: old.get(k) for k in stamp} == stamp:
                continue
            r.update(values)
            r["corrected"] = {**stamp, "at": at}
            changed += 1
    if changed:
        _write(path, rows)
    return {"run": str(run), "table": table, "rows_changed": changed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("table")
    ap.add_argument("--where", action="append", default=[], help="FIELD=VALUE a row must have (repeat)")
    ap.add_argument("--set", dest="values", action="append", default=[], help="FIELD=VALUE to set (repeat)")
    ap.add_argument("--from-run", type=Path, help="append the matching rows of this run's table instead")
    ap.add_argument("--reason", required=True)
    a = ap.parse_args(argv)
    if not (a.run / "manifest.json").exists():
        raise SystemExit(f"{a.run} is not a run directory (no manifest.json)")
    if not a.values and a.from_run is None:
        raise SystemExit("nothing to do: give --set FIELD=VALUE or --from-run RUN")
    print(correct(a.run, a.table, _pairs(a.where, "--where"), _pairs(a.values, "--set"), a.reason, a.from_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
