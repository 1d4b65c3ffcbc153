"""The book's glossary: one definition per term, written as ``rendered/glossary.html`` beside the front page and linked
from every page of every book (``servebook.render`` puts the link in each page's bar, ``servebook.frontpage`` on the front
page).

    write_glossary("rendered")          # -> Path("rendered/glossary.html"), the same bytes every time
    TERMS["tpot"].name                  # 'TPOT'
    href("ttft", "..")                  # '../glossary.html#ttft'

A definition says what the book means by the word, where in the book (or the code) the quantity is computed, and, where
the same word could mean two things, which one the book uses.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .profile.seed import REFERENCE_PROFILE_RUN

__all__ = ["Term", "TERMS", "FILE", "USES", "glossary_html", "write_glossary", "href", "link_first_uses"]

FILE = "glossary.html"


@dataclass(frozen=True)
class Term:
    key: str        # the anchor: glossary.html#KEY
    name: str       # as the pages write it
    text: str       # the definition (HTML: <code> spans only)


def _t(key: str, name: str, text: str) -> Term:
    return Term(key, name, text)


_LIST = [
    _t("mla", "MLA (multi-head latent attention)",
       "The attention of DeepSeek-V3 and Kimi-K2.5: keys and values are compressed into one low-rank latent vector per token "
       "(width <code>kv_lora_rank</code> plus a small rotary part), and that latent is what the KV cache holds. The decode "
       "kernels this book forces (Triton MLA, FlashMLA, FlashInfer MLA, CUTLASS MLA, FlashAttention MLA) all read that "
       "latent cache; chapter 02 reads which one each engine picks, chapter 03 runs each."),
    _t("ttft", "TTFT (time to first token)",
       "From a request's arrival to the first streamed event carrying text: the wait for a concurrency slot, prefill, and "
       "the first token. Chapter 05's client measures it per request (<code>ttft_s</code>); <code>ttft_server_s</code> leaves "
       "the client's slot wait out."),
    _t("tpot", "TPOT (time per output token)",
       "A request's time from its first token to its last divided by the tokens after the first: (last token &minus; first "
       "token) / (output tokens &minus; 1), each token timed by the network read that brought it; the wait after the last "
       "token until the stream ends ([DONE]) counts in end-to-end latency only. Runs recorded before this rule timed it to "
       "the stream's end, and chapter 05 says which rule timed its rows. The single-stream decode rate is its inverse, "
       "1000 / TPOT in ms = tok/s."),
    _t("itl", "ITL (inter-token latency)",
       "The gap between two tokens as the client receives them. A server that streams several tokens per chunk gives one gap "
       "per chunk: servebook keeps that gap (<code>chunk_gaps_ms</code>) and divides it by the tokens in the chunk for the "
       "per-token figure (<code>itl_ms</code>)."),
    _t("decode", "decode and prefill",
       "Prefill processes the whole prompt in one forward pass and produces the first token; decode then produces one token "
       "per forward pass (a decode step), reading every weight and the KV cache each time. Single-stream speed is decode speed."),
    _t("single-stream", "single stream",
       "One request at a time (concurrency 1): the rate a single user sees, in output tokens per second. The seed's 63.6 and "
       "82.5 tok/s are single-stream rates."),
    _t("card", "card (model card)",
       "A JSON file in <code>data/models</code> (e.g. <code>kimi-k2.5</code>) with a real model's architecture and "
       "dimensions: layers, heads, MLA ranks, experts, vocabulary, quantization. Slices are built from it, and the bytes one "
       "decode token reads are computed from it; a card holds no weights."),
    _t("slice", "slice",
       "A model directory made by <code>servebook model build CARD</code>: the card's real architecture and full width with "
       "fewer layers (default: the dense layers plus one MoE layer; &ldquo;kimi-2L&rdquo; is the 2-layer Kimi-K2.5 slice), "
       "with seeded random bf16 weights or none (<em>dummy</em>: the engine starts with <code>--load-format dummy</code>). "
       "Its rates are the slice's, never the full model's. Two slices of one card, engine and machine that differ in their "
       "repeated layers give one layer's GPU time: the difference of their GPU-busy times per decode step, divided by the layers "
       "between them (<code>slice_linearity</code>); the difference of their served times does not, where the host sets a "
       "shallow slice's step (<a href=\"#host-bound\">host-bound</a>)."),
    _t("seed", "seed (the seed case)", "SEED"),  # filled from data/reference/seed-case.json (_seed_text)
    _t("graph", "graph / eager (CUDA graphs)",
       "With CUDA graphs the engine records a decode step's kernel launches once per batch size and replays the whole step "
       "with one launch; eager mode launches every kernel from Python each step. Tables say <code>mode graph</code> or "
       "<code>mode eager</code>; a graph/eager comparison holds only between two rows that differ in nothing else (same "
       "model slice, weights and quantization)."),
    _t("host-bound", "host-bound",
       "A decode step whose time is set by the CPU side (the scheduler, Python, kernel launches) rather than by the GPU's "
       "kernels: the GPU waits between kernels, which shows as <a href=\"#gpu-idle\">GPU idle</a> time. CUDA graphs shorten "
       "it; a faster kernel does not."),
    _t("gpu-idle", "GPU idle",
       "The one definition the book uses: the time inside a profiled decode step when no kernel is running on the GPU, i.e. "
       "the step's time minus the time at least one kernel ran (<code>step_ms &minus; busy_ms</code>, "
       "<code>servebook.profile.steps</code>; the category &ldquo;gpu idle&rdquo; of a decode-step breakdown). Time per token "
       "measured without the profiler minus the profiled kernels' time is a different quantity (what the host adds beyond "
       "the GPU); a page that gives it names it so."),
    _t("gpu-busy", "GPU busy",
       "The time inside a profiled decode step during which at least one kernel runs on the GPU (<code>busy_ms</code>, "
       "<code>servebook.profile.steps</code>): the step's time is GPU busy plus <a href=\"#gpu-idle\">GPU idle</a>. Kernels "
       "that overlap on two streams count once, so the kernels of a layer can sum to more than its GPU-busy time."),
    _t("teacher-forced", "teacher-forced (check)",
       "An output check on the prefill path: the default's tokens are fed in as the prompt and, at each position, the forced "
       "backend's top-1 next token is compared with the default's (<code>tf_top1_agreement</code>). It exercises the prefill "
       "kernels only; the decode-path check (<code>decode_agreement</code>) compares tokens generated step by step, so only it "
       "says the decode kernel is correct."),
    _t("profile", "hardware profile / trace profile",
       "Two different things. A <em>hardware profile</em> is a file in <code>data/hardware</code> (e.g. "
       "<code>rtx-pro-6000</code>): datasheet facts about a GPU and host (capability, memory, bandwidth, links) that a "
       "what-if fakes; nothing in it was measured. A <em>trace profile</em> (a decode-step profile) is a torch-profiler trace "
       "of real decode steps on a real GPU, its kernels sorted into categories (attention, MoE experts, communication ...) "
       f"with their times (chapter 05; the recordings <code>h200x1-prof</code> and <code>{REFERENCE_PROFILE_RUN}</code>, the "
       "<a href=\"#profile-run\">profile run</a>)."),
    _t("what-if", "what-if",
       "A book run with <code>--profile NAME</code>: no GPU is used. Chapter 02 runs each engine's own backend-selection code "
       "with the GPU faked from the hardware profile; chapters 03 to 05 plan rather than measure; chapter 06 projects decode "
       "time from trace profiles recorded on another GPU. Its rates are predictions and say so."),
    _t("reference", "reference book",
       "The book whose numbers the front page quotes, one number per quantity: this project's reference H200 recording "
       "(named on the front page; <code>servebook.shelf.REFERENCE_BOOKS</code>). Other books' numbers for the same "
       "configuration appear in its table &ldquo;same configuration, other methods&rdquo;, with why each differs. Only this "
       "is called the reference book; the what-if's projection reads its decode-step profiles from the "
       "<a href=\"#profile-run\">profile run</a>, and a recording unit is compared with another through its "
       "<a href=\"#anchor\">anchor configuration</a>."),
    _t("profile-run", "profile run (the projection's)",
       "The recording whose decode-step profiles (trace profiles of model slices on an H200) the what-if book's chapter 06 "
       f"carries to another GPU: <code>data/runs/{REFERENCE_PROFILE_RUN}</code> (<code>servebook.profile.seed.REFERENCE_PROFILE_RUN</code>; "
       "its tables name it <code>reference_run</code>). Chapter 06 of the what-if book shows the rows it uses; a run of profiles "
       "only, its own book has chapters 05 and 06."),
    _t("anchor", "anchor configuration (of a recording unit)",
       "A recording is made in units, each on one lent machine (its GPUs' identity; else the UTC day it was taken). Machines "
       "differ, so rows of two units are never subtracted: each unit measures one configuration again, its anchor (in "
       "<code>h200x1-ref</code>: SGLang with the Triton attention backend on the deepest INT4 slice, 12 MoE layers, over 2 "
       "server starts), and rows of different units are compared only as ratios to their own unit's anchor "
       "(<code>servebook.profile.machines.relative_to_reference</code>; the plans' field <code>reference</code>)."),
    _t("reference-grid", "reference grid (chapter 04)",
       "Chapter 04's all-reduce grid recorded on an H200 x2 host (<code>data/runs/h200x2-nccl</code>): every NCCL setting at "
       "every message size, the grid a run's own (smaller) grid is read against. It is not the reference book."),
    _t("start", "start (server start)",
       "One launch of an engine's server: started, warmed up, measured, stopped. A rate moves between starts by more than "
       "within one, so an interval &ldquo;over N server starts&rdquo; (one mean per start, N &ge; 2) can separate two "
       "configurations; an interval &ldquo;within one server start&rdquo; (over runs of one start) cannot, and gives no "
       "verdict."),
    _t("interval", "95% interval",
       "Mean &plusmn; the half-width of a 95% Student-t confidence interval. &ldquo;Faster&rdquo; is said only where two "
       "intervals over server starts do not overlap; drawn as a bar, an interval never goes below zero (a rate cannot)."),
    _t("roofline", "roofline",
       "The memory-bandwidth bound on single-stream decode: the bytes one decode token must read (weights, plus the KV cache) "
       "divided by the GPU's read bandwidth is the least time a token can take; its inverse is the highest possible tok/s "
       "(<code>servebook.roofline</code>). A rate is quoted as a percentage of it."),
    _t("tp", "TP (tensor parallelism)",
       "Each layer's weights split across N GPUs (<code>--tensor-parallel-size N</code>, TP=N); every rank computes its share "
       "and the partial results are combined with <a href=\"#all-reduce\">all-reduces</a>. TP=1 has none."),
    _t("all-reduce", "all-reduce",
       "The collective that sums a tensor across the GPUs of a tensor-parallel group and leaves the sum on every GPU. At "
       "decode each one carries one token's hidden state (hidden size &times; 2 bytes in bf16, a few kB), so its latency, "
       "not bandwidth, matters; chapter 04 measures it under each NCCL setting."),
    _t("nccl", "NCCL",
       "NVIDIA's collective library, which the engines' all-reduces use unless they use a custom kernel. Its environment "
       "variables (<code>NCCL_PROTO</code>, <code>NCCL_ALGO</code>, <code>NCCL_P2P_LEVEL</code> ...) choose the protocol "
       "and path; <code>NCCL_DEBUG=INFO</code> prints what it chose."),
    _t("nccl-protocols", "LL / LL128 / Simple (NCCL protocols)",
       "The three ways NCCL moves data between GPUs, chosen by <code>NCCL_PROTO</code> (else by NCCL per message size and "
       "topology). <em>LL</em> (low latency) sends 4 bytes of data with a 4-byte flag in each 8-byte store, so a receiver "
       "polls the data itself: the lowest latency, half the bandwidth at most. <em>LL128</em> does the same per "
       "128-byte line (120 bytes of data), near full bandwidth, and needs hardware that keeps such lines in order (NVLink); "
       "<em>Simple</em> sends large chunks behind memory fences: the most bandwidth, the highest latency. A decode "
       "all-reduce is a few kB, so latency decides."),
    _t("seed-block", "seed block (the seed's NCCL block)", "SEED_BLOCK"),  # filled from servebook.nccl.e2e.SEED_ENV
    _t("host-rule", "host rule", "HOST_RULE"),  # filled from servebook.profile.predict.HOST_RULES
    _t("starts-rule", "starts rule, equivalence margin, start-to-start spread", "STARTS_RULE"),  # from servebook.profile.starts
    _t("kv-splits", "KV splits (split grid)",
       "A decode attention kernel with one query per sequence splits the sequence's KV cache into chunks, each read by its "
       "own thread block, and a second kernel combines the partial results; the number of chunks is the split count, and "
       "with the heads and sequences it sets the kernel's grid. Each engine decides the count by its own rule, read from "
       "its code in the what-if book's table <code>seed_attention_12</code>."),
    _t("custom-all-reduce", "custom all-reduce",
       "An engine's own all-reduce kernel (SGLang's and vLLM's <code>custom_all_reduce</code>): each GPU writes into its "
       "peers' buffers directly, used instead of NCCL for small messages where the engine's own checks allow it (chapter 04 "
       "reads which). NCCL's variables do not reach an all-reduce this kernel serves; "
       "<code>--disable-custom-all-reduce</code> hands those all-reduces to NCCL."),
    _t("floors", "communication floor, kernel floor",
       "Two lower bounds. The <em>communication floor</em> of a TP=N decode step is its collectives per token times one "
       "all-reduce's latency: the least time a token spends in all-reduces (chapter 05's seed case on paper, chapter 06's "
       "communication row), beside the bandwidth floor of the <a href=\"#roofline\">roofline</a>. The <em>kernel floor</em> "
       "is the projection's rule that a weights-bound kernel carried to another GPU is never made shorter than the shortest "
       "such kernel measured, which no longer shrinks with fewer bytes (<code>servebook.profile.projection.kernel_floors</code>)."),
    _t("links", "links (NV18, PIX, NODE, SYS)",
       "The path between two GPUs as <code>nvidia-smi topo -m</code> names it: NV<em>n</em>, <em>n</em> NVLinks; PIX and PXB, "
       "PCIe through one or several switches; PHB and NODE, through the CPU's PCIe host bridges within one socket; SYS, "
       "across the link between CPU sockets, the slowest. Chapter 01 reads it on a real host; a hardware profile's links are "
       "assumed (<code>servebook.probe.collect</code>: every pair on NVLink as on a baseboard, else SYS for PCIe-only GPUs)."),
    _t("attention-backend", "attention backend (triton, flashinfer, fa3, flashmla; TRITON_MLA, FLASHMLA ...)",
       "The kernels an engine runs for attention, chosen by its own code unless forced: SGLang's names are lower case "
       "(<code>triton</code>, <code>flashinfer</code>, <code>fa3</code> = FlashAttention 3, <code>flashmla</code>, "
       "<code>cutlass_mla</code>), vLLM's upper case (<code>TRITON_MLA</code>, <code>FLASHMLA</code>, "
       "<code>FLASH_ATTN_MLA</code> = FlashAttention's MLA, <code>FLASHINFER_MLA</code>, <code>CUTLASS_MLA</code>). Chapter "
       "02 reads which one each engine picks and why; chapter 03 forces each and checks it ran."),
    _t("restart-spread", "restart spread",
       "How far a rate moves from one <a href=\"#start\">server start</a> to the next, which is more than it moves within one "
       "start. &ldquo;No difference beyond the restart spread&rdquo; says that two configurations' 95% intervals over server "
       "starts overlap: they are not told apart (<code>servebook.stated.intervals.separated</code>)."),
]



def _seed_text() -> str:
    """The seed's definition, its figures read from ``data/reference/seed-case.json`` (never typed in here)."""
    from .stated.figures import seed_case

    c = seed_case()
    tok = c["single_stream_tok_s"]
    return (f"The case this book follows (<code>{html.escape(c['file'])}</code>): {html.escape(str(c['model']))} on the hardware "
            f"profile <code>{html.escape(str(c['profile']))}</code> at tensor parallel {c['tp']}, SGLang "
            f"{html.escape(str(c['engines']['sglang']).split(' ')[0])} at {tok['sglang']} tok/s single stream against vLLM at "
            f"{tok['vllm']}. &ldquo;The seed's figures&rdquo; are that investigation's own; this book never measured them, "
            "and its write-ups are not taken as evidence.")


def _seed_block_text() -> str:
    """The seed block's definition, its settings read from ``servebook.nccl.e2e.SEED_ENV`` (never typed in here)."""
    from .nccl.e2e import SEED_ENV

    block = " ".join(f"{k}={v}" for k, v in SEED_ENV.items())
    return ("The NCCL environment the seed launched vLLM with (copied from its systemd unit) and SGLang without: "
            f"<code>{html.escape(block)}</code>. Chapter 04 measures each of its settings; the what-if projection gives "
            "each engine the all-reduce latency of the environment it was launched with, and &ldquo;the seed's NCCL "
            "block&rdquo; for SGLang is a candidate first change, not yet measured on the seed's host.")


def _host_rule_text() -> str:
    """The host rule's definition, from ``servebook.profile.predict`` (the rule the projection uses and its alternative)."""
    from .profile.predict import HOST_RULE, HOST_RULE_RUN, HOST_RULES

    other = "; ".join(f"&ldquo;{k}&rdquo;: {html.escape(v)}" for k, v in HOST_RULES.items() if k != HOST_RULE)
    return ("How the what-if projection combines the host's time per decode step with the GPU's time: the rule "
            f"&ldquo;{HOST_RULE}&rdquo;, {html.escape(HOST_RULES[HOST_RULE])}; the whole models of "
            f"<code>{HOST_RULE_RUN}</code> validated it (<code>servebook.profile.predict.HOST_RULE_RUN</code>"
            + ("" if HOST_RULE_RUN != REFERENCE_PROFILE_RUN else ", the <a href=\"#profile-run\">profile run</a>")
            + ("; the <a href=\"#profile-run\">profile run</a> is another recording, of slices" if HOST_RULE_RUN != REFERENCE_PROFILE_RUN
               else "") + "). The "
            f"bound beside it is {other}. The projection's row &ldquo;host beyond the GPU (host rule)&rdquo; is what the "
            "rule adds to the GPU's time.")


def _starts_rule_text() -> str:
    """The starts rule's definition, its numbers read from ``servebook.profile.starts`` (the rule the recording runs)."""
    from .profile.starts import DEEP_MOE_LAYERS, EQUIVALENCE_PCT, MAX_STARTS, starts_required

    deep, shallow = starts_required(DEEP_MOE_LAYERS), starts_required(DEEP_MOE_LAYERS - 1)
    return ("How the reference recording decides between two profiled configurations (<code>servebook.profile.starts</code>): "
            f"{deep} server starts for slices of {DEEP_MOE_LAYERS} or more MoE layers, {shallow} for shallower ones, one more "
            f"(at most {MAX_STARTS}) where the first two differ by more than the difference being decided. The <em>start-to-start "
            "spread</em> of a configuration is its largest minus its smallest per-start value; the <em>equivalence margin</em> "
            f"is the larger of {EQUIVALENCE_PCT:g}% of the mean and that spread, and a difference below it is &ldquo;no "
            "difference&rdquo;. Not the <a href=\"#restart-spread\">restart spread</a>, which compares served rates by their "
            "95% intervals over starts.")


_FILL = {"SEED": _seed_text, "SEED_BLOCK": _seed_block_text, "HOST_RULE": _host_rule_text, "STARTS_RULE": _starts_rule_text}
_LIST = [Term(t.key, t.name, _FILL[t.text]()) if t.text in _FILL else t for t in _LIST]
TERMS: dict[str, Term] = {t.key: t for t in _LIST}

_CSS = """body{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;line-height:1.5;padding:0 1em}
dt{font-weight:600;margin-top:1em}dd{margin:.2em 0 0 1.2em}dt:target,dt:target+dd{background:#fff8c5}"""


def href(key: str, up: str = "") -> str:
    """The link to one term: ``glossary.html#KEY``, prefixed by ``up`` (``..`` from a book's page)."""
    if key not in TERMS:
        raise KeyError(f"no glossary term {key!r}; terms: {', '.join(TERMS)}")
    return f"{up.rstrip('/') + '/' if up else ''}{FILE}#{key}"


def glossary_html() -> str:
    """The glossary page: every term with its definition, in reading order."""
    items = "".join(f'<dt id="{t.key}">{html.escape(t.name)}</dt><dd>{t.text}</dd>' for t in _LIST)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>servebook: glossary</title><style>{_CSS}</style>'
            '</head><body><p><a href="index.html">servebook: the books</a></p><h1>Glossary</h1>'
            "<p>What the books mean by each term. Every page of every book links here from its top bar.</p>"
            f"<dl>{items}</dl></body></html>\n")


def write_glossary(directory: str | os.PathLike) -> Path:
    """Write ``directory/glossary.html`` (only when its bytes change)."""
    out = Path(directory) / FILE
    page = glossary_html()
    if not out.exists() or out.read_text(encoding="utf-8") != page:
        out.write_text(page, encoding="utf-8")
    return out


# How each term is written in the pages' prose (a regular expression): ``link_first_uses`` links its first use on a page.
USES = {
    "mla": r"\bMLA\b", "ttft": r"\bTTFT\b", "tpot": r"\bTPOT\b", "itl": r"\bITL\b",
    "decode": r"\bprefill\b", "single-stream": r"\bsingle[- ]stream\b", "card": r"\bmodel cards?\b",
    "slice": r"\bslices?\b", "seed-block": r"\bseed(?:'s NCCL)? block\b", "seed": r"\bseed(?:'s)?\b", "graph": r"\bCUDA graphs?\b|\beager\b",
    "host-bound": r"\bhost-bound\b", "gpu-idle": r"\b[Gg][Pp][Uu] idle\b", "teacher-forced": r"\bteacher-forced\b",
    "profile": r"\bhardware profile\b|\btrace profile\b|\bdecode-step profiles?\b", "what-if": r"\bwhat-if\b",
    "reference": r"\breference (?:book|recording)\b", "profile-run": r"\bprofile run\b",
    "anchor": r"\banchor configuration\b", "reference-grid": r"\breference grid\b", "start": r"\bserver starts?\b", "interval": r"\b95% interval\b",
    "roofline": r"\broofline\b", "tp": r"\btensor[- ]parallel(?:ism)?\b", "all-reduce": r"\ball-reduces?\b",
    "nccl": r"\bNCCL\b", "nccl-protocols": r"\bLL128\b",
    "host-rule": r"\bhost rule\b", "restart-spread": r"\brestart spread\b",
    "gpu-busy": r"\b[Gg][Pp][Uu][- ]busy\b", "starts-rule": r"\bstarts rule\b|\bequivalence margin\b|\bstart-to-start spread\b",
    "kv-splits": r"\bKV splits?\b|\bsplit grid\b", "custom-all-reduce": r"\bcustom (?:PCIe )?all-reduce\b",
    "floors": r"\bcommunication floor\b|\bkernel floors?\b", "links": r"\blinks (?:SYS|NV\d+)\b",
    "attention-backend": r"\battention[- ]backends?\b",
}
_USE = re.compile("|".join(f"(?P<{k.replace('-', '_')}>{v})" for k, v in USES.items()))
# Text inside these elements is never linked: code, preformatted output, links, headings, the page's head, folded summaries.
_SKIP = {"a", "code", "pre", "script", "style", "title", "head", "summary", "h1", "h2", "h3", "h4", "h5", "h6", "textarea", "svg"}
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*?(/?)>|<!--.*?-->|<!\[CDATA\[.*?\]\]>|<![^>]*>", re.S)
_VOID = {"br", "img", "hr", "meta", "link", "input", "col", "source", "wbr", "area", "base", "embed", "param", "track"}


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", html.unescape(text))


def link_first_uses(page: str, up: str = "..") -> str:
    """``page`` with the first use of each glossary term in its prose linked to the glossary, the definition as the
    link's title (shown on hover): each term defined where a reader first meets it. Code, output listings, links,
    headings and folded summaries are left as they are; the visible text does not change."""
    out, pos, skip, done = [], 0, [], set()

    def link(m: re.Match) -> str:
        key = next(k for k, v in m.groupdict().items() if v).replace("_", "-")
        if key in done:
            return m.group(0)
        done.add(key)
        return (f'<a class="sb-term" href="{href(key, up)}" title="{html.escape(_plain(TERMS[key].text), quote=True)}">'
                f"{m.group(0)}</a>")

    for m in _TAG.finditer(page):
        text = page[pos:m.start()]
        out.append(_USE.sub(link, text) if text and not skip and len(done) < len(USES) else text)
        out.append(m.group(0))
        pos = m.end()
        closing, name = m.group(1), (m.group(2) or "").lower()
        if name in _SKIP and not m.group(3):
            if closing:
                if name in skip:
                    del skip[len(skip) - 1 - skip[::-1].index(name)]
            else:
                skip.append(name)
    tail = page[pos:]
    out.append(_USE.sub(link, tail) if tail and not skip else tail)
    return "".join(out)
