"""The numbers the book states in prose, each tagged with the quantity it is, and the registry that recomputes them.

    from servebook.stated import q
    Markdown(f"single stream {q('single_tok_s', t['single_tok_s'], ',.1f', of=t['label'])} tok/s")
    #  -> single stream <span class="sb-q" data-q="single_tok_s" data-of="..." data-v="78.2416..." data-f=",.1f">78.2</span> tok/s
    expected(store, "single_tok_s", "transformers/default")   # the same quantity recomputed from the run's tables
    check_render("rendered/h200x2-live")                       # Report: every page against the tables and the other pages

One helper formats and tags a number (``q``), so a page can never show a figure other than the value it tags; one
registry (``QUANTITIES``) says how each quantity is computed from a run's tables (or, for a reference figure, from
its file in ``data/reference/``) and on which chapter pages it must appear; ``check_render`` reads every page of a
rendered book, groups what the pages state by quantity, and compares each with the recomputation and with the
other pages (``tests/test_stated.py`` runs it on every committed render). A page whose code never used ``q``
predates the tags: ``check_render`` reports it as such instead of checking it.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable

from .paths import book_root, data_dir

__all__ = [
    "q", "text_of", "seed_sentence", "Quantity", "QUANTITIES", "Stated", "Report", "reference", "seed_case", "site_count", "selection_of",
    "card_roofline", "expected", "stated_on", "check_render", "answers", "MISSING", "REFERENCE_NCCL_RUN",
    "say_selection", "say_backends", "say_allreduce", "say_throughput",
]

MISSING = object()  # a quantity the run's tables do not give


# -- stating a number ------------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """numpy and pandas scalars as the Python values they hold; NaN as None."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if hasattr(value, "item") and not isinstance(value, (list, dict)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def text_of(value: Any, fmt: str = "") -> str:
    """What a page shows for ``value``: ``format(value, fmt)``; for a bool, ``fmt`` is "text if true|text if false"."""
    value = _plain(value)
    if isinstance(value, bool):
        yes, _, no = (fmt or "yes|no").partition("|")
        return yes if value else no
    if value is None:
        return "n/a"
    if fmt.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)  # a count read back from a table as 5.0
    return format(value, fmt)


def q(name: str, value: Any, fmt: str = "", of: str | None = None, code: bool = False) -> str:
    """``value`` formatted with ``fmt`` and tagged as the quantity ``name`` (of ``of``), for a Markdown or HTML output.

    ``code=True`` shows it as inline code (a backend or setting name). A value that is None is shown as "n/a" and
    not tagged: the run did not give it. ``name`` must be in ``QUANTITIES``.
    """
    if name not in QUANTITIES:
        raise KeyError(f"{name!r} is not a quantity servebook.stated knows; add it to QUANTITIES with how to recompute it")
    value = _plain(value)
    shown = html.escape(text_of(value, fmt))
    if value is None:
        return shown
    attrs = {"class": "sb-q", "data-q": name, "data-v": json.dumps(value), "data-f": fmt}
    if of is not None:
        attrs["data-of"] = str(of)
    span = "<span " + " ".join(f'{k}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items()) + f">{shown}</span>"
    return f"<code>{span}</code>" if code else span


# -- reference figures and shared definitions ------------------------------------------------------------------
def reference(name: str) -> dict:
    """A reference figure file, ``data/reference/<name>.json`` (figures the book quotes and never measured)."""
    return json.loads((data_dir() / "reference" / f"{name}.json").read_text())


def seed_case() -> dict:
    """The seed case's own figures (``data/reference/seed-case.json``) and the loss the book quotes from them:
    ``loss`` is the share of vLLM's single-stream rate SGLang did not reach (1 - sglang / vllm)."""
    ref = reference("seed-case")
    tok = ref["single_stream_tok_s"]
    return {**ref, "loss": 1 - tok["sglang"] / tok["vllm"], "vllm_faster": tok["vllm"] / tok["sglang"] - 1,
            "file": "data/reference/seed-case.json"}


def seed_sentence() -> str:
    """The seed case's gap in one sentence, every figure tagged and quoted from its file (chapters 01, 02 and 05)."""
    s = seed_case()
    tok = s["single_stream_tok_s"]
    return (f"In the seed case ({s['model']} on {s['tp']}x {s['profile']}), SGLang decoded "
            f"{q('seed_tok_s', tok['sglang'], '.1f', of='sglang')} tok/s single stream against vLLM's "
            f"{q('seed_tok_s', tok['vllm'], '.1f', of='vllm')}, {q('seed_loss', s['loss'], '.0%')} less "
            f"(put the other way, vLLM was "
            f"{q('seed_vllm_faster', s['vllm_faster'], '.0%')} faster). The figures are the seed's own measurements, quoted "
            f"from `{s['file']}`; this book never measured them.")


def site_count(store, engine: str, version: str) -> int:
    """Lines of an engine version's code that write its attention backend (chapter 02's static reading): distinct
    ``where`` (file:line) in the table ``selection_sites``. A line that writes two targets counts once; the definition
    chapter 06 uses too."""
    return len({r.get("where") for r in store.rows("selection_sites") if r.get("engine") == engine and r.get("version") == version})


def selection_of(row: dict) -> str:
    """The subject of one what-if answer (a row of ``selection``, or chapter 02's answer): engine, version, model, GPU."""
    return f"{row.get('engine')} {row.get('version')}, {row.get('model')} on {row.get('gpu')}"


def card_roofline(model: str, tp: int, profile: str) -> dict:
    """The bandwidth-only single-stream roofline of a model card on ``tp`` GPUs of a hardware profile, predicted from
    the data files (``data/models``, ``data/hardware``), the bytes counted layer by layer: what chapter 05 states for
    the seed case and the what-if book for its profile."""
    from . import roofline
    from .profiles import load_profile

    card = roofline.load_model_card(model)
    arch = roofline.config_bytes_per_token(card)
    bw = load_profile(profile)["memory_bandwidth_tbs"]
    r = roofline.decode_roofline(arch["bytes_per_token"], bw, tp=tp, allreduce_us=0.0,
                                 allreduces_per_token=roofline.allreduces_per_token(card)) if tp > 1 else \
        roofline.decode_roofline(arch["bytes_per_token"], bw)
    return {"tok_s": r["tok_s_bandwidth"], "bytes_per_token": arch["bytes_per_token"], "bandwidth_tbs": bw, "tp": tp,
            "subject": f"{model} on {tp}x {profile}"}


REFERENCE_NCCL_RUN = "h200x2-nccl"  # chapter 04's reference grid, data/runs/h200x2-nccl


# -- statements two chapters share (the chapter's answer, and chapter 06's) -------------------------------------
def say_selection(store) -> list[str]:
    """Markdown bullets: each what-if answer the run recorded, once per engine version, model and GPU, with the
    line that wrote it and how many lines of that version's code write the backend (chapters 02 and 06)."""
    answers: dict[Any, list[dict]] = {}
    for r in store.rows("selection"):
        answers.setdefault(selection_of(r) if r.get("method") == "dynamic" else (selection_of(r), "static"), []).append(r)
    names = {"this-host": "On this host", "seed": "Seed case"}
    lines, stated_sites = [], set()
    for subject, rows in answers.items():
        r = rows[-1]
        who = " and ".join(dict.fromkeys(names.get(x.get("case"), str(x.get("case")).capitalize()) for x in rows))
        if r.get("method") != "dynamic":
            lines.append(f"- {who}: {r.get('engine')} {r.get('version')}, `{r.get('model')}` on {r.get('gpu')}: static reading only "
                         f"({r.get('reason')}).")
            continue
        code_of = f"{r.get('engine')} {r.get('version')}"
        n = site_count(store, r.get("engine"), r.get("version"))
        sites = (f"{q('selection_sites', n, 'd', of=code_of)} lines of its code write the backend" if n
                 else "its code was not read statically in this run")
        stated_sites.add(code_of)
        rule = "; ".join(f"`{c.get('text')}`" for c in (r.get("conditions") or [])[-3:]) or "no condition on the way"
        lines.append(f"- {who}: {code_of} picks {q('selected_backend', r.get('attention_backend'), of=subject, code=True)} for "
                     f"`{r.get('model')}` on {r.get('gpu')}" + (f" (capability {r['capability']})" if r.get("capability") else "")
                     + f", written at `{(r.get('decided_by') or {}).get('where')}` because {rule} ({sites}).")
    for e, v in sorted({(x.get("engine"), x.get("version")) for x in store.rows("selection_sites")}, key=str):
        if f"{e} {v}" not in stated_sites:
            lines.append(f"- {e} {v}'s code, read statically: {q('selection_sites', site_count(store, e, v), 'd', of=f'{e} {v}')} "
                         "lines write the attention backend.")
    return lines


def say_backends(b: dict) -> str:
    """One engine's answer from chapter 03's sweep (a ``servebook.findings.backends`` item): the default, the fastest
    correct start, the comparison, and whether a change is supported (chapters 03 and 06)."""
    from .findings import separated

    name = b["engine"]
    best = b.get("best_reported") or b.get("best")
    is_default = b.get("best_tok_s") == b.get("default_tok_s")
    return (f"the default loaded {q('default_backend', b.get('default_reported'), of=name, code=True)} and ran "
            f"{q('default_tok_s', b.get('default_tok_s'), ',.1f', of=name)} ± {q('default_ci95', b.get('default_ci95'), ',.1f', of=name)} "
            f"tok/s single stream; the fastest correct start was {q('best_backend', best, of=name, code=True)} at "
            f"{q('best_tok_s', b.get('best_tok_s'), ',.1f', of=name)} ± {q('best_ci95', b.get('best_ci95'), ',.1f', of=name)}"
            + (" (the default itself)" if is_default else
               f", {separated(b.get('best_tok_s'), b.get('best_ci95'), b.get('default_tok_s'), b.get('default_ci95'))} against the default")
            + f". A change of backend is {q('change_supported', bool(b.get('change_supported')), 'supported|not supported', of=name)}"
            + (": both 95% intervals separate and its output agreed." if b.get("change_supported") else ": keep the engine's own choice."))


def say_allreduce(n: dict | None) -> str:
    """This run's all-reduce answer (a ``servebook.findings.nccl`` result): the backend, the setting its grid picks and
    that setting's latency at the batch-1 message (chapters 04 and 06)."""
    if not n:
        return "No all-reduce was recorded in this run: nothing to pick from."
    if n.get("backend") != "nccl":
        return (f"Measured with {q('allreduce_backend', n.get('backend'), code=True)} on the CPU ({n.get('world_size')} processes): "
                f"{q('allreduce_us', _chosen_us(n), ',.1f')} us per all-reduce at the smallest message ({n.get('b1_bytes')} B, "
                f"{n.get('mode')}). NCCL settings do not apply to it, and these microseconds say nothing about NCCL on GPUs: "
                "they compare with no NCCL figure.")
    setting = _chosen_setting(n)
    return (f"{q('allreduce_backend', n.get('backend'), code=True)} on {n.get('world_size')} GPUs, {n.get('settings')} settings, "
            f"{n.get('mode')}-replayed, at the batch-1 message ({n.get('b1_bytes')} B): this run's grid picks "
            f"{q('allreduce_setting', setting, code=True)} at {q('allreduce_us', _chosen_us(n), ',.1f')} us per all-reduce "
            f"(NCCL's defaults: {text_of(n.get('default_us'), ',.1f')} us). Why: {n.get('reason')}.")


def say_throughput(t: dict, runs: int | None = None) -> list[str]:
    """Chapter 05's answer for one served configuration (a ``servebook.findings.throughput`` item): single stream with
    its interval and run count, % of the bandwidth roofline, the sweep's peak (chapters 05 and 06). ``runs``: the
    chapter's parameter, to say when a resumed run kept a measurement made with another count."""
    label = t["label"]
    if t.get("single_tok_s") is None:
        return [f"- **{label}**: no single-stream measurement succeeded."]
    n_runs = int(t["runs"]) if t.get("runs") is not None else None
    kept = (f"; measured before this page's runs={runs}: the run resumed and kept that measurement"
            if runs is not None and n_runs is not None and n_runs != runs else "")
    out = [f"- **{label}** single stream: {q('single_tok_s', t['single_tok_s'], ',.1f', of=label)} ± "
           f"{q('single_ci95', t.get('single_ci95'), ',.1f', of=label)} tok/s (95% CI over {q('single_runs', n_runs, 'd', of=label)} "
           f"runs{kept})."]
    if t.get("pct_of_roofline") is not None:
        out.append(f"- {label}: {q('pct_of_roofline', t['pct_of_roofline'], '.3g', of=label)}% of the "
                   f"{q('roofline_tok_s', t['roofline_tok_s'], ',.0f', of=label)} tok/s bandwidth roofline (bandwidth: {t.get('roofline_source')}).")
    if t.get("peak_tok_s") is not None:
        gain = f" ({t['peak_tok_s'] / t['c1_tok_s']:.2f}x C=1)" if t.get("c1_tok_s") else ""
        out.append(f"- {label}: {text_of(t.get('c1_tok_s'), ',.1f')} tok/s at C=1; peak {q('peak_tok_s', t['peak_tok_s'], ',.1f', of=label)} "
                   f"tok/s at C={q('peak_c', t.get('peak_c'), 'd', of=label)}{gain}, each user then getting "
                   f"{text_of(t.get('peak_per_user_tok_s'), ',.1f')} tok/s" + (" (some levels hit their time budget)" if t.get("truncated") else "") + ".")
    return out


# -- the registry ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantity:
    """A quantity the book states: how to recompute it, for which subjects, and on which chapter pages it must appear.

    ``compute(store)`` returns ``{of: value}`` (``of`` is None for a quantity with one subject); ``lookup(of)``, where
    given, computes a subject that the run does not list (a reference figure named by its subject)."""

    name: str
    what: str
    compute: Callable[[Any], dict]
    chapters: tuple[str, ...] = ()
    lookup: Callable[[str], Any] | None = None


def _backends(store) -> dict:
    from .findings import backends

    return {b["engine"]: b for b in backends(store) if b.get("correct")}


def _throughput(store) -> dict:
    from .findings import throughput

    return {t["label"]: t for t in throughput(store)}


def _nccl(store) -> dict:
    from .findings import nccl

    return nccl(store) or {}


def _ceilings(store) -> dict:
    """Chapter 05's comparison of client ceilings (``servebook.bench.ceiling_verdict``), when the run has one."""
    from .bench.ceiling import ceiling_verdict

    return ceiling_verdict(store.rows("client_ceiling"))


def _ceiling_values(store) -> dict:
    v = _ceilings(store)
    return dict(v["ceilings"]) if v["compared"] else {}


def _ceiling_ratios(store) -> dict:
    v = _ceilings(store)
    return {k: r for k, r in v["ratios"].items() if r is not None} if v["compared"] else {}


def _fast_path(store) -> dict:
    v = _ceilings(store)
    return {None: v["justified"]} if v["justified"] is not None else {}


def _chosen_setting(n: dict):
    if n.get("backend") != "nccl":
        return None
    return n.get("setting") or "default"


def _chosen_us(n: dict):
    if not n:
        return None
    s = _chosen_setting(n)
    return n.get("best_us") if s not in (None, "default") else n.get("default_us")


def _reference_nccl() -> dict:
    from .results import RunStore

    path = data_dir() / "runs" / REFERENCE_NCCL_RUN
    return _nccl(RunStore(path)) if (path / "manifest.json").exists() else {}


def _ref_us(setting: str):
    n = _reference_nccl()
    if setting == "default":
        return n.get("default_us")
    return n.get("best_us") if setting == n.get("setting") else None


def _roofline_lookup(of: str):
    m = re.fullmatch(r"(.+) on (\d+)x (.+)", of or "")
    if not m:
        return MISSING
    try:
        return card_roofline(m.group(1), int(m.group(2)), m.group(3))["tok_s"]
    except Exception:  # noqa: BLE001 - an unknown card or profile: the page states something no data file gives
        return MISSING


def _selection(store) -> dict:
    return {selection_of(r): r.get("attention_backend") for r in store.rows("selection") if r.get("method") == "dynamic"}


def _sites(store) -> dict:
    keys = {(r.get("engine"), r.get("version")) for r in store.rows("selection_sites")}
    return {f"{e} {v}": site_count(store, e, v) for e, v in keys}


def _per(getter: Callable[[Any], dict], field_: str | Callable[[dict], Any]) -> Callable[[Any], dict]:
    pick = field_ if callable(field_) else (lambda d, k=field_: d.get(k))
    return lambda store: {k: pick(d) for k, d in getter(store).items()}


_SEED = {"seed_loss": lambda store: {None: seed_case()["loss"]},
         "seed_tok_s": lambda store: dict(seed_case()["single_stream_tok_s"])}

QUANTITIES: dict[str, Quantity] = {x.name: x for x in [
    # the seed case (reference figures, data/reference/seed-case.json)
    Quantity("seed_loss", "share of vLLM's single-stream rate SGLang did not reach in the seed case", _SEED["seed_loss"], ("01", "02")),
    Quantity("seed_vllm_faster", "how much faster vLLM's single-stream rate was than SGLang's in the seed case",
             lambda store: {None: seed_case()["vllm_faster"]}),
    Quantity("seed_tok_s", "single-stream tok/s the seed case measured, by engine", _SEED["seed_tok_s"]),
    Quantity("seed_allreduce_share", "all-reduce's share of SGLang's decode time in the seed case's profile",
             lambda store: {None: seed_case()["allreduce_share_of_sglang_decode"]}),
    # chapter 02: what the engine's own code picks, and where
    Quantity("selected_backend", "attention backend an engine version's own resolution picks (per engine, model, GPU)",
             _selection, ("02", "06")),
    Quantity("selection_sites", "lines of an engine version's code that write its attention backend", _sites, ("02", "06")),
    # chapter 03: each backend forced
    Quantity("default_backend", "backend the engine's default (auto) reported loading", _per(_backends, "default_reported"), ("03", "06")),
    Quantity("default_tok_s", "single-stream tok/s of the default backend (chapter 03)", _per(_backends, "default_tok_s"), ("03", "06")),
    Quantity("default_ci95", "95% half-width of the default backend's tok/s", _per(_backends, "default_ci95")),
    Quantity("best_backend", "fastest backend with correct output (the backend it reported)",
             _per(_backends, lambda b: b.get("best_reported") or b.get("best")), ("03", "06")),
    Quantity("best_tok_s", "single-stream tok/s of the fastest correct backend", _per(_backends, "best_tok_s"), ("03", "06")),
    Quantity("best_ci95", "95% half-width of the fastest correct backend's tok/s", _per(_backends, "best_ci95")),
    Quantity("change_supported", "whether forcing the fastest backend is supported (faster than the default beyond both "
             "95% intervals, correct output)", _per(_backends, "change_supported"), ("03", "06")),
    # chapter 04: all-reduce at the decode message size
    Quantity("allreduce_backend", "collective backend this run measured all-reduce with",
             lambda store: {None: _nccl(store).get("backend")} if _nccl(store) else {}, ("04", "06")),
    Quantity("allreduce_setting", "NCCL setting this run's grid picks for decode-sized all-reduces",
             lambda store: {None: _chosen_setting(_nccl(store))}, ("04", "06")),
    Quantity("allreduce_us", "all-reduce latency (us) at the batch-1 message under the setting this run picks",
             lambda store: {None: _chosen_us(_nccl(store))}, ("04", "06")),
    Quantity("ref_allreduce_setting", "NCCL setting the reference grid (data/runs/h200x2-nccl) picks",
             lambda store: {None: _reference_nccl().get("setting")}),
    Quantity("ref_allreduce_us", "reference grid's all-reduce latency (us) at its batch-1 message, by setting",
             lambda store: {}, lookup=lambda of: _ref_us(of) if _ref_us(of) is not None else MISSING),
    # chapter 05: single stream, the sweep, the roofline
    Quantity("single_tok_s", "single-stream decode tok/s (chapter 05)", _per(_throughput, "single_tok_s"), ("05", "06")),
    Quantity("single_ci95", "95% half-width of the single-stream tok/s", _per(_throughput, "single_ci95")),
    Quantity("single_runs", "runs the single-stream interval is computed over", _per(_throughput, "runs"), ("05",)),
    Quantity("roofline_tok_s", "bandwidth roofline (tok/s) of this run's model on this host", _per(_throughput, "roofline_tok_s"),
             ("05", "06")),
    Quantity("pct_of_roofline", "single-stream tok/s as % of the bandwidth roofline", _per(_throughput, "pct_of_roofline"),
             ("05", "06")),
    Quantity("peak_tok_s", "highest throughput of the concurrency sweep", _per(_throughput, "peak_tok_s"), ("05", "06")),
    Quantity("peak_c", "concurrency of the sweep's highest throughput", _per(_throughput, "peak_c")),
    # chapter 05: the client ceilings, servebook's transport against httpx and sglang.bench_serving
    Quantity("client_ceiling_tok_s", "a client's ceiling: highest streamed tok/s against the fake server over the levels "
             "compared (servebook, httpx, sglang.bench_serving)", _ceiling_values, ("05",)),
    Quantity("ceiling_ratio", "a client's ceiling over sglang.bench_serving's on the same fake server", _ceiling_ratios, ("05",)),
    Quantity("fast_path_justified", "whether servebook's own HTTP transport is justified: its ceiling reaches the goal "
             "(CEILING_GOAL x bench_serving's) and httpx's does not", _fast_path, ("05",)),
    Quantity("card_roofline_tok_s", "bandwidth-only roofline of a model card on N GPUs of a profile (the seed case's, or "
             "the what-if's), from data/models and data/hardware", lambda store: {}, lookup=_roofline_lookup),
]}


def expected(store, name: str, of: str | None = None) -> Any:
    """The quantity ``name`` (of ``of``) recomputed from the run's tables, or ``MISSING``."""
    return _pick(QUANTITIES[name], QUANTITIES[name].compute(store), of)


def _pick(quantity: Quantity, values: dict, of: str | None) -> Any:
    """``of``'s value among a quantity's computed ``values`` (or its lookup), or ``MISSING``."""
    if of in values and _plain(values[of]) is not None:
        return _plain(values[of])
    if quantity.lookup is not None:
        value = quantity.lookup(of)
        return MISSING if value is MISSING or value is None else _plain(value)
    return MISSING


# -- reading a rendered page -----------------------------------------------------------------------------------
@dataclass
class Stated:
    """One tagged number on one page."""

    page: str
    name: str
    of: str | None
    value: Any
    fmt: str
    text: str

    def key(self) -> tuple[str, str | None]:
        return (self.name, self.of)

    def where(self) -> str:
        return f"{self.page} shows {self.text!r}"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[dict] = []
        self._open: list[dict | None] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span":
            item = {**a, "_text": ""} if "sb-q" in (a.get("class") or "").split() else None
            self._open.append(item)

    def handle_endtag(self, tag):
        if tag == "span" and self._open:
            item = self._open.pop()
            if item is not None:
                self.found.append(item)

    def handle_data(self, data):
        for item in self._open:
            if item is not None:
                item["_text"] += data


def stated_on(page_html: str, page: str = "") -> list[Stated]:
    """Every tagged number of one rendered page."""
    parser = _Tags()
    parser.feed(page_html)
    out = []
    for a in parser.found:
        try:
            value = json.loads(a.get("data-v", "null"))
        except json.JSONDecodeError:
            value = a.get("data-v")
        out.append(Stated(page=page, name=a.get("data-q") or "", of=a.get("data-of"), value=value, fmt=a.get("data-f") or "",
                          text=a["_text"]))
    return out


def _uses_tags(page_html: str) -> bool:
    """Whether the page's code used the tagging helper (its folded code is in the page)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", page_html))
    return "servebook.stated" in text or "import stated" in text


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


# -- a whole rendered book ------------------------------------------------------------------------------------
@dataclass
class Report:
    """What ``check_render`` found: the pages read, the pages that predate the tags, and every disagreement."""

    render: str
    run: str
    pages: dict[str, str] = field(default_factory=dict)  # page -> "tagged" | "predates the tags" | "failed chapter"
    stated: list[Stated] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (page, or "" for a disagreement between pages; what)
    box_problems: list[tuple[str, str]] = field(default_factory=list)  # (page, what): the box "This run, in short"

    def of_page(self, page: str) -> list[str]:
        return [m for p, m in self.problems if p == page]

    def across(self) -> list[str]:
        return [m for p, m in self.problems if not p]

    @property
    def tagged(self) -> list[str]:
        return [p for p, s in self.pages.items() if s != "predates the tags"]

    @property
    def predating(self) -> list[str]:
        return [p for p, s in self.pages.items() if s == "predates the tags"]


def _run_of(render: Path) -> Path:
    meta = json.loads((render / "run.json").read_text())
    run = Path(meta["run_dir"])
    return run if run.is_absolute() else book_root() / run


def _answer_box(page_html: str) -> list[str] | None:
    """The items of the page's "This run, in short" box (their text), or None when the page has none."""
    m = re.search(r'<div class="sb-answer">(.*?)</div>', page_html, flags=re.S)
    if not m:
        return None
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", li)).split()) for li in re.findall(r"<li>(.*?)</li>", m.group(1), flags=re.S)]


def answers(store) -> dict[str, list[str] | None]:
    """The box "This run, in short" each chapter's page would show if rendered now: the renderer's own box
    (``servebook.book``, chapter 06's statements from ``servebook.findings``) for the run's tables as they are."""
    from . import book

    found = book._answers(store)
    return {n: _answer_box(book._answer_box(found, n) or "<none>") for n in ("01", "02", "03", "04", "05", "06")}


def _box_problems(page: str, box: list[str], expect: list[str] | None) -> list[str]:
    expect = expect or []
    if box == expect:
        return []
    for a, b in zip(box, expect):
        if a != b:
            return [f"{page}'s box \"This run, in short\" states {a!r}; recomputed from the run's tables: {b!r}"]
    return [f"{page}'s box \"This run, in short\" has {len(box)} lines, the run's tables give {len(expect)}: "
            f"{(expect[len(box):] or box[len(expect):])[0]!r} differs"]


def check_render(render: str | Path, run: str | Path | None = None) -> Report:
    """Check every page of a rendered book against the run it was made from (``run.json`` names it).

    Every page: its box "This run, in short" states what the run's tables give now. Every page whose code used ``q``:
    each tagged number shows what its value formats to and equals the quantity recomputed from the run's tables, and
    every quantity the registry requires on that chapter is there (unless the chapter failed in the run). Across
    pages: one quantity, one value."""
    from .results import RunStore

    render = Path(render)
    run_path = Path(run) if run is not None else _run_of(render)
    store = RunStore(run_path)
    report = Report(render=str(render), run=str(run_path))
    computed: dict[str, dict] = {}  # each quantity computed once per check

    def values_of(name):
        if name not in computed:
            computed[name] = QUANTITIES[name].compute(store)
        return computed[name]

    def want(name, of):
        return _pick(QUANTITIES[name], values_of(name), of)

    def problem(page, text):
        report.problems.append((page, text))

    boxes = None
    for page_path in sorted(render.glob("0[0-9]_*.html")):
        page = page_path.name
        text = page_path.read_text(encoding="utf-8")
        box = _answer_box(text)
        if box is not None:
            boxes = answers(store) if boxes is None else boxes
            report.box_problems += [(page, p) for p in _box_problems(page, box, boxes.get(page[:2], []))]
        found = stated_on(text, page)
        if not found and not _uses_tags(text):
            report.pages[page] = "predates the tags"
            continue
        failed = 'id="sb-failed"' in text
        report.pages[page] = "failed chapter" if failed else "tagged"
        report.stated += found
        for s in found:
            if s.name not in QUANTITIES:
                problem(page, f"{s.where()} tagged as {s.name!r}, a quantity the registry does not know")
                continue
            shown = text_of(s.value, s.fmt)
            if s.text != shown:
                problem(page, f"{s.where()} for {s.name}[{s.of}] but its value {s.value!r} formats to {shown!r}")
            truth = want(s.name, s.of)
            if truth is MISSING:
                problem(page, f"{s.where()} for {s.name}[{s.of}], which the run's tables do not give")
            elif not _same(s.value, truth):
                problem(page, f"{s.where()} for {s.name}[{s.of}] (value {s.value!r}); recomputed from "
                              f"{run_path.name}'s tables: {truth!r} ({text_of(truth, s.fmt)})")
        if failed:
            continue
        present = {s.key() for s in found}
        for name, quantity in QUANTITIES.items():
            if page[:2] not in quantity.chapters:
                continue
            for of, value in values_of(name).items():
                if _plain(value) is not None and (name, of) not in present:
                    problem(page, f"{page} does not state {name}[{of}] ({quantity.what}); the run's tables give {_plain(value)!r}")
    groups: dict[tuple, list[Stated]] = {}
    for s in report.stated:
        groups.setdefault(s.key(), []).append(s)
    for (name, of), items in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        values: list = []
        for s in items:
            if not any(_same(s.value, v) for v in values):
                values.append(s.value)
        if len(values) > 1:
            problem("", f"pages disagree on {name}[{of}]: " + "; ".join(f"{s.where()} ({s.value!r})" for s in items))
    return report
