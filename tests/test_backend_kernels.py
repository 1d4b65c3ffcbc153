"""Which kernels make a backend's difference (``servebook.profile.backend_kernels``): the real kernel tables of
h200x1-ref's backends units (unit 4 ``h200x1-ref-backends``, unit 5 ``h200x1-ref-backends2``), and SYNTHETIC tables for
the matching rule's edge cases."""

from __future__ import annotations

import re
import shutil

import pytest

from servebook.paths import data_dir
from servebook.profile.backend_kernels import (MIN_US, SHOWN, kernel_shift, kernel_shift_markdown, short_name,
                                               stream_word)
from servebook.profile.backends_at_depth import backend_comparisons
from servebook.results import RunStore

REF = data_dir() / "runs" / "h200x1-ref"


def _table(kernels: list[tuple[str, int, float, float]]) -> dict:
    """A SYNTHETIC kernel table: (name, stream rank, median µs, presence) per position of the step."""
    names = sorted({k[0] for k in kernels})
    return {"names": names, "seq": [names.index(k[0]) for k in kernels], "stream_rank": [k[1] for k in kernels],
            "cat": ["kernel"] * len(kernels), "median_us": [k[2] for k in kernels], "present": [k[3] for k in kernels]}


def _real_comparisons():
    store = RunStore.at(REF)
    return store, {(c["engine"], c["word"]): c for c in backend_comparisons(store.rows("profile_runs"))}


def test_kernels_match_by_name_and_stream_and_average_over_starts():
    a1 = _table([("gemm_a", 0, 10.0, 1.0), ("gemm_a", 0, 30.0, 1.0), ("attn_new", 0, 50.0, 1.0), ("reduce", 1, 20.0, 1.0)])
    a2 = _table([("gemm_a", 0, 10.0, 1.0), ("gemm_a", 0, 30.0, 1.0), ("reduce", 1, 40.0, 0.5)])   # attn_new missing here
    b = _table([("gemm_a", 0, 40.0, 1.0), ("attn_old", 0, 70.0, 1.0), ("reduce", 0, 2.0, 1.0), ("reduce", 1, 2.0, 1.0)])
    shift = {(k["name"], k["stream"]): k for k in kernel_shift([a1, a2], [b])}
    assert shift[("gemm_a", "main")]["us"] == {"a": 40.0, "b": 40.0} and shift[("gemm_a", "main")]["count"]["a"] == 2
    assert shift[("attn_new", "main")]["us"]["a"] == 25.0 and shift[("attn_new", "main")]["count"] == {"a": 0.5, "b": 0}
    assert shift[("attn_old", "main")]["diff_us"] == -70.0
    # one name on two streams: two kernels (a side stream's kernel is not the main stream's)
    assert shift[("reduce", "side 1")]["us"] == {"a": 20.0, "b": 2.0} and shift[("reduce", "main")]["us"]["a"] == 0
    assert [k["name"] for k in kernel_shift([a1, a2], [b])][0] == "attn_old"   # largest |difference| first
    assert kernel_shift([], [b]) == [] and kernel_shift([a1], []) == []
    assert stream_word(0) == "main" and stream_word(2) == "side 2"


def test_short_names_drop_noise_elide_whole_parts_and_stay_distinct():
    import glob
    import json

    assert short_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::OpaqueType<2u> >(x, y)") == \
        "CatArrayBatchedCopy<OpaqueType<2u> >"
    # a long name loses its arguments, lambdas and then template arguments from the right, whole, never a word cut
    name = ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put_kernel_impl"
            "<at::native::OpaqueType<2> >(at::TensorIterator&)::{lambda(char*, long)#1}>(at::TensorIteratorBase&, "
            + "c10::ArrayRef<long>, " * 9 + "bool)::{lambda(int)#1}>(long, int)")
    assert short_name(name) == "index_elementwise_kernel<128, 4, gpu_index_kernel<index_put_kernel_impl<OpaqueType<2> >(…)>(…)>"
    assert short_name("k<" + "a, " * 60 + "b<c>>(int)", width=20) == "k<…>"
    names = {n for f in glob.glob(str(REF / "traces" / "*.kernels.json")) for n in json.loads(open(f).read())["names"]}
    assert names and all(not re.search(r"\w…", short_name(n)) and len(short_name(n)) <= 96 for n in names)
    # two names shortened alike on one stream stay two kernels, told apart by a number
    long = ["void k<" + "a" * 100 + ">(int)", "void k<" + "b" * 100 + ">(int)"]
    assert short_name(long[0]) == short_name(long[1]) == "k<…>"
    shift = kernel_shift([_table([(long[0], 0, 10.0, 1.0), (long[1], 0, 20.0, 1.0)])], [_table([("x", 0, 1.0, 1.0)])])
    assert sorted(k["short"] for k in shift) == ["k<…>", "k<…> #2", "x"]


def test_the_real_units_name_the_kernels_that_make_each_backends_difference():
    store, by = _real_comparisons()
    fa3, flashmla, flashinfer = by[("sglang", "fa3")], by[("sglang", "flashmla")], by[("sglang", "flashinfer")]

    def shift(c):
        from servebook.profile.backend_kernels import _pick
        from servebook.profile.linearity import load_kernel_tables
        t = load_kernel_tables(store)
        return {(k["short"], k["stream"]): k for k in kernel_shift(_pick(t, c["labels"]["backend"]),
                                                                    _pick(t, c["labels"]["seed"]))}

    # SGLang's triton path writes the MLA cache and builds its query with torch indexing and two concatenations, 13
    # launches each (one per attention layer) on the main stream; fa3 and flashinfer launch none of them and write the
    # cache with one set_mla_kv_buffer_kernel a layer; flashmla keeps triton's three
    torch_path = [s for s in shift(fa3) if s[1] == "main" and re.match(r"index_elementwise_kernel<128, 4, gpu_index_kernel"
                                                                           r"<index_put_kernel_impl<OpaqueType<2> |"
                                                                           r"CatArrayBatchedCopy", s[0])]
    assert len(torch_path) == 3
    for c in (fa3, flashinfer):
        s = shift(c)
        for k in torch_path:
            assert round(s[k]["count"]["b"]) == 13 and s[k]["count"]["a"] == 0 and s[k]["diff_us"] < -15
        assert round(s[("set_mla_kv_buffer_kernel", "main")]["count"]["a"]) == 13
        assert s[("set_mla_kv_buffer_kernel", "main")]["count"]["b"] == 0
        assert -100 < sum(s[k]["diff_us"] for k in torch_path) < -70
    s = shift(flashmla)
    assert all(round(s[k]["count"]["a"]) == 13 and abs(s[k]["diff_us"]) < 5 for k in torch_path)
    # flashmla's side-stream split-K reduce lasts longer while its main stream runs: contention, listed on its stream
    red = next(k for (n, st), k in s.items() if n.startswith("cublasLt::splitKreduce") and st == "side 1")
    assert round(red["count"]["a"]) == round(red["count"]["b"]) == 12 and red["diff_us"] > 60


def test_the_section_states_every_figure_tagged_and_recomputed(tmp_path):
    import mistune
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from servebook import quantities as _all  # noqa: F401  every chapter's quantities registered
    from servebook import stated
    from servebook.stated.registry import expected
    from servebook.stated.tags import stated_on

    store, by = _real_comparisons()
    comps = list(by.values())
    md = kernel_shift_markdown(store, comps)
    assert md.count("*Which kernels make it:") == len(comps) == 5
    words = re.sub(r"<span[^>]*>|</span>", "", md)
    assert "| norm/rope/elementwise | `CatArrayBatchedCopy<OpaqueType<2u>, unsigned int, 3, 64, 64>` | main | " in words
    assert "its time is contention, not work" in words
    html = markdown2html_mistune(md)
    assert html.count("<table>") == 5 and html.count("<tr>") <= 5 * (SHOWN + 1)
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    tags = stated_on(md)
    assert {t.name for t in tags} == {"backend_kernel_us", "backend_kernel_launches", "backend_kernel_diff_us",
                                      "backend_kernel_stream_diff_us", "backend_kernel_tables"}
    assert all(abs(t.value) >= MIN_US for t in tags if t.name == "backend_kernel_diff_us")
    for t in tags:
        assert expected(store, t.name, t.of) == pytest.approx(t.value), (t.name, t.of)
    t = next(t for t in tags if t.name == "backend_kernel_diff_us")
    assert expected(store, t.name, t.of) != pytest.approx(t.value * 1.01)
    # a run whose kernel tables are gone states none of it (the comparisons stay, their kernels are not guessed)
    for p in [REF / "manifest.json", *REF.glob("*.jsonl")]:
        shutil.copyfile(p, tmp_path / p.name)
    bare = RunStore.at(tmp_path)
    assert backend_comparisons(bare.rows("profile_runs")) and kernel_shift_markdown(bare, comps) == ""


def test_the_registry_computes_the_kernel_figures_once_and_again_when_a_table_changes(tmp_path, monkeypatch):
    """``stated.registry.per_run`` with the kept kernel tables as files of the state: the nine kernel quantities of a
    check share one computation, made again when a kernel table (not a .jsonl) changes or goes."""
    from servebook.profile import backend_kernels
    from servebook.profile import quantities as pq
    from servebook.stated.registry import expected

    computed = []
    real = backend_kernels.kernel_shift_figures
    monkeypatch.setattr(backend_kernels, "kernel_shift_figures", lambda *a: computed.append(1) or real(*a))
    shutil.copytree(REF, tmp_path / "ref")
    store = RunStore.at(tmp_path / "ref")
    names = [q.name for q in pq._UNITS if q.name.startswith(("backend_kernel_", "engine_kernel_"))]
    assert len(names) == 9
    for name in names:
        expected(store, name, "no such subject")
    assert len(computed) == 1                                 # one computation for the nine
    before = dict(pq._kernel_figures(store)["backend_kernel_tables"])
    assert before and len(computed) == 1
    c = next(c for c in backend_comparisons(store.rows("profile_runs")) if len(c["labels"]["backend"]) >= 2)
    subject, n = " / ".join([c["engine"], c["word"], c["key"], c["word"]]), len(c["labels"]["backend"])
    assert before[subject] == n
    run = next(r for r in store.rows("profile_runs") if r["label"] == c["labels"]["backend"][0])
    (store.path / run["kernel_table"]).unlink()   # a table gone: computed again, one start fewer where it counted
    after = pq._kernel_figures(store)["backend_kernel_tables"]
    assert len(computed) == 2 and after[subject] == n - 1 and all(after[s] <= m for s, m in before.items())


def test_chapter_06_puts_the_kernels_after_the_backends_comparisons():
    from servebook.profile.chapter import where_time_goes

    page = where_time_goes(RunStore.at(REF))
    assert page.index("**Backends at") < page.index("*Which kernels make it: SGLang `fa3` against `triton`*")


def test_categories_side_by_side_name_each_sides_kernels():
    from servebook.profile.backend_kernels import category_sides

    a = _table([("_fwd_kernel_stage2", 0, 13.0, 1.0), ("nvjet_gemm", 0, 40.0, 1.0), ("nvjet_gemm", 1, 5.0, 1.0)])
    b = _table([("_fwd_kernel_stage2", 0, 5.0, 1.0), ("concat_and_cache_mla_kernel", 0, 2.0, 1.0), ("nvjet_gemm", 0, 44.0, 1.0)])
    rows = {r["category"]: r for r in category_sides([a], [b])}
    assert list(rows) == ["attention", "dense gemm"]   # the classifier's order, only categories either side has
    att = rows["attention"]
    assert att["us"] == {"a": 13.0, "b": 7.0} and att["diff_us"] == 6.0
    assert [k["short"] for k in att["kernels"]["a"]] == ["_fwd_kernel_stage2"]          # none of b's is listed on a's side
    assert [k["short"] for k in att["kernels"]["b"]] == ["_fwd_kernel_stage2", "concat_and_cache_mla_kernel"]
    assert rows["dense gemm"]["us"] == {"a": 45.0, "b": 44.0}
    assert [(k["stream"], k["us"]) for k in rows["dense gemm"]["kernels"]["a"]] == [("main", 40.0), ("side 1", 5.0)]
    assert category_sides([], [b]) == []


def test_the_engines_side_by_side_on_the_real_units_tagged_and_recomputed():
    import mistune
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from servebook import quantities as _all  # noqa: F401
    from servebook import stated
    from servebook.profile.backend_kernels import engine_kernels_markdown
    from servebook.profile.same_machine import seed_units
    from servebook.stated.registry import expected
    from servebook.stated.tags import stated_on

    store = RunStore.at(REF)
    units = seed_units(store.rows("profile_runs"))
    md = engine_kernels_markdown(store, units)
    assert md.count("*The engines' kernels side by side: SGLang `triton` and vLLM `TRITON_MLA`*") == len(units) >= 2
    words = re.sub(r"<span[^>]*>|</span>", "", md)
    # each engine's own INT4 expert kernel named on its side of one row
    assert re.search(r"\| moe experts \| `device::marlin_moe::Marlin<…>` \(`main`\) [\d.]+;.*\| `marlin_moe_wna16::Marlin<…>` "
                     r"\(`main`\) [\d.]+;", words)
    html = markdown2html_mistune(md)   # as the book renders it: a table per unit, five cells a row
    assert html.count("<table>") == len(units) and html.count("<td>") == 5 * (html.count("<tr>") - len(units))
    page = f'<div class="jp-RenderedMarkdown" data-mime-type="text/markdown">{mistune.html(md)}</div>'
    assert [str(u) for u in stated.untagged_numbers(page)] == []
    tags = stated_on(md)
    assert {t.name for t in tags} == {"engine_kernel_us", "engine_kernel_category_us", "engine_kernel_diff_us",
                                      "engine_kernel_tables"}
    for t in tags:
        assert expected(store, t.name, t.of) == pytest.approx(t.value), (t.name, t.of)
    # the categories' kernel times are each side's table, not the busy time: the busy time decides, the page says so
    assert "not the GPU busy time" in words


def test_chapter_06_puts_the_engines_side_by_side_before_the_backends():
    from servebook.profile.chapter import where_time_goes

    page = where_time_goes(RunStore.at(REF))
    assert page.index("*The engines' kernels side by side") < page.index("**Backends at")


def test_recorded_md_states_the_kernel_readings_the_tables_give():
    """RECORDED.md of h200x1-ref states session 30's kernel readings in words; each is recomputed here from the kept
    kernel tables (to its stated rounding; "about" within 1 µs, the flashmla reduce within 5 µs)."""
    from servebook.profile.backend_kernels import _pick, category_sides
    from servebook.profile.linearity import load_kernel_tables
    from servebook.profile.same_machine import seed_units

    store, by = _real_comparisons()
    text = " ".join((REF / "RECORDED.md").read_text().split())
    t = load_kernel_tables(store)

    def sh(c, start, stream="main"):   # the kernel of that name start and stream whose time moves most
        return max((k for k in kernel_shift(_pick(t, c["labels"]["backend"]), _pick(t, c["labels"]["seed"]))
                    if k["short"].startswith(start) and k["stream"] == stream), key=lambda k: abs(k["diff_us"]))

    fi, fm = by[("sglang", "flashinfer")], by[("sglang", "flashmla")]
    said = re.search(r"about (\d+) µs per step\) and two `CatArrayBatchedCopy` concatenations \(about (\d+) and (\d+) µs\)",
                     text)
    got = [sh(fi, "index_elementwise_kernel<128, 4, gpu_index_kernel<index_put"), sh(fi, "CatArrayBatchedCopy<"),
           sh(fi, "CatArrayBatchedCopy_vectorized<")]
    assert said and all(abs(int(s) - k["us"]["b"]) <= 1 for s, k in zip(said.groups(), got)), (said, got)
    red = re.search(r"`cublasLt::splitKreduce_kernel` lasting about (\d+) µs per step longer", text)
    assert red and abs(int(red.group(1)) - sh(fm, "cublasLt::splitKreduce_kernel", "side 1")["diff_us"]) <= 5
    unit = next(u for u in seed_units(store.rows("profile_runs")) if u["run_id"] == "h200x1-ref-backends")
    cats = {r["category"]: r for r in category_sides(_pick(t, unit["labels"]["sglang"]), _pick(t, unit["labels"]["vllm"]))}
    att = re.search(r"Attention: SGLang triton (\d+) against vLLM TRITON_MLA (\d+) µs per step", text)
    assert att and [int(x) for x in att.groups()] == [round(cats["attention"]["us"][s]) for s in ("a", "b")]
    dense = re.search(r"Dense GEMM is (\d+) µs per step shorter on SGLang's side and norm/rope/elementwise (\d+) µs longer",
                      text)
    assert dense and [int(x) for x in dense.groups()] == [round(-cats["dense gemm"]["diff_us"]),
                                                         round(cats["norm/rope/elementwise"]["diff_us"])]
