"""Chapter 02: static reading, transformers what-if, cards, bad input (fast); SGLang envs (slow, cached)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servebook.errors import EngineError, ModelError, ParameterError
from servebook.selection import find_sites, list_cards, load_card, materialize, read_selection, render_tree, whatif
from servebook.engines.envs import list_engines, parse_engine_spec, resolve_engine

SYNTH = '''
def is_sm100_supported():
    return cap()[0] == 10

class Args:
    def choose(self, model_arch):
        if model_arch in ["DeepseekV3ForCausalLM"]:
            if is_sm100_supported():
                self.attention_backend = "trtllm_mla"
        elif self.use_mla:
            self.attention_backend = "flashinfer" if has_flashinfer() else "triton"
        else:
            overrides["attention_backend"] = self._default_attn_backend()

    def _default_attn_backend(self):
        if is_hopper():
            return "fa3"
        return "triton"
'''


def test_ast_reader_on_synthetic_source():
    sites = find_sites(SYNTH, {"attention_backend"})
    got = [(s.line, s.target, s.value, s.function) for s in sites]
    assert (9, "attention_backend", '"trtllm_mla"', "Args.choose") in got
    mla = [s for s in sites if s.value == '"triton"' and s.function == "Args.choose"]
    assert mla and [str(c) for c in mla[0].conditions] == [
        'not (model_arch in ["DeepseekV3ForCausalLM"])', "self.use_mla", "not has_flashinfer()"]
    trt = next(s for s in sites if s.value == '"trtllm_mla"')
    assert trt.hardware and trt.model
    # the called function's returns are followed
    assert any(s.function == "Args._default_attn_backend" and s.value == '"fa3"' for s in sites)
    assert "=> attention_backend" in render_tree(sites)


def test_ast_reader_on_real_transformers_source():
    import transformers

    r = read_selection(Path(transformers.__file__).parent, "transformers", transformers.__version__)
    funcs = {s.function for s in r.sites}
    assert any(f.endswith("get_correct_attn_implementation") for f in funcs)
    assert any(s.value == '"sdpa"' for s in r.sites)


def test_transformers_whatif_embedded_this_host_asked_once_and_again_when_the_model_changes(tmp_path):
    """transformers' own resolution on this host; asked again, the answer comes from the memo (while it is on); the
    model's config.json edited in place (same path, one field: the architecture) is asked of the engine again, and the
    engine's answer for an architecture it does not know is an error, never the kept answer."""
    import shutil

    from servebook.selection.memo import remember_answers, remembered
    from servebook.selection.whatif import whatif_many

    model = shutil.copytree(materialize("embedded"), tmp_path / "embedded")
    remember_answers()
    try:
        r = whatif("transformers", str(model))
        assert r["method"] == "dynamic"
        # established by running transformers' own resolution (AutoModelForCausalLM.from_config, no
        # attn_implementation requested): DeepseekV3 supports sdpa -> get_correct_attn_implementation takes "sdpa"
        assert r["attention_backend"] == "sdpa"
        assert r["decided_by"]["function"].endswith("get_correct_attn_implementation")
        assert remembered() == {"asked": 1, "reused": 0, "kept": 1} and "reused" not in r
        # the same request through the matrix's path (forked cases): no engine process, the same answer
        (again,) = whatif_many("transformers", [str(model)])
        assert again.pop("reused") is True and again == r and remembered()["asked"] == 1
        again["resolved"]["attention_backend"] = "changed by the caller"  # a caller's edit does not reach the memo
        third = whatif("transformers", str(model))
        assert third.pop("reused") is True and third == r and remembered() == {"asked": 1, "reused": 2, "kept": 1}
        # one field differs: an architecture transformers does not know, in the same directory
        cfg = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps(cfg | {"architectures": ["FooForCausalLM"], "model_type": "foo_bar"}))
        with pytest.raises(ModelError, match="does not know architecture"):
            whatif("transformers", str(model))
        assert remembered() == {"asked": 2, "reused": 2, "kept": 1}  # asked, and a failure is not kept
    finally:
        remember_answers(False)
    assert remembered() == {"asked": 0, "reused": 0, "kept": 0}


def test_whatif_memo_key_covers_every_input(tmp_path, monkeypatch):
    """The memo's key changes with each thing an answer depends on, one at a time (no engine run needed to show it)."""
    import shutil

    from servebook.selection.memo import _memo_key
    from servebook.selection.whatif import _case, _setup

    model = shutil.copytree(materialize("kimi-k2.5"), tmp_path / "kimi")

    def key(gpu="rtx-pro-6000", kernel_libs=None, cuda=None, tp=1, server_args=None):
        env, _hw, _libs, _reading, request = _setup("transformers", gpu, None, None, kernel_libs, cuda, tp)
        return _memo_key(env, request | _case(str(model), server_args, tp)[1])

    base = key()
    assert key() == base  # the same request: the same key (the memo can answer it)
    variants = {"gpu": key(gpu="b200"), "kernel_libs": key(kernel_libs={"flashinfer": False}), "cuda": key(cuda="13.0"),
                "tp_size": key(tp=8), "server_args": key(server_args={"attention_backend": "triton"})}
    cfg = model / "config.json"
    cfg.write_text(cfg.read_text() + " ")  # same path, other content
    variants["model_files"] = key()
    monkeypatch.setenv("SGLANG_SERVEBOOK_MEMO_PROBE", "1")
    variants["environ"] = key()
    assert len({base, *variants.values()}) == len(variants) + 1, variants


def test_cards_are_facts_with_sources(tmp_path):
    assert {"kimi-k2.5", "deepseek-v3", "llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b", "embedded"} <= set(list_cards())
    for name in list_cards():
        c = load_card(name)
        assert c["config"]["architectures"] and c["parameters"]["total"] >= c["parameters"]["active"] > 0
        assert c["bytes_per_param"] > 0 and c["sources"]["config"]
    from servebook.embedded import EMBEDDED_CONFIG
    assert load_card("embedded")["config"] == EMBEDDED_CONFIG
    d = materialize("kimi-k2.5", root=tmp_path)
    assert sorted(os.listdir(d)) == ["config.json"]
    assert json.loads((d / "config.json").read_text())["architectures"] == ["KimiK25ForConditionalGeneration"]


def test_bad_input_is_one_line():
    with pytest.raises(EngineError, match="engines: transformers, sglang, vllm"):
        parse_engine_spec("tgi")
    with pytest.raises(EngineError, match="not prepared"):
        resolve_engine("sglang==0.0.0")
    with pytest.raises(EngineError, match="no such interpreter"):
        resolve_engine("sglang", engine_python="/nonexistent/python")
    with pytest.raises(EngineError, match="not installed"):
        resolve_engine("sglang", engine_python=sys.executable)
    with pytest.raises(ModelError, match="no config.json"):
        whatif("transformers", "/tmp")
    with pytest.raises(ModelError, match="no model card"):
        whatif("transformers", "no-such-card")
    with pytest.raises(ParameterError):
        whatif("transformers", "embedded", gpu="no-such-gpu")


def test_cli_standalone():
    p = subprocess.run([sys.executable, "-m", "servebook.selection.cli", "whatif", "--engine", "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "unknown engine" in p.stderr


def test_install_plan_drops_gpu_only_and_keeps_pins():
    from servebook.selection.requires import install_plan

    keep, drop = install_plan(["torch==2.9.1", "transformers==4.57.1", "flashinfer_python==0.6.3", "sgl-kernel==0.3.21",
                               "nvidia-cutlass-dsl>=4.3.4", "nvidia-ml-py", "cuda-python==12.9", "torchvision", "xgrammar==0.1.27",
                               'torchcodec==0.8.0; sys_platform != "linux"', 'pytest; extra == "test"'])
    assert keep == ["transformers==4.57.1", "nvidia-ml-py", "xgrammar==0.1.27"]
    assert "torch==2.9.1" in drop and "cuda-python==12.9" in drop and all("pytest" not in d for d in drop)


def test_assumed_cuda_comes_from_the_engine_pin_not_the_profile_minimum():
    from servebook.engines.envs import EngineEnv
    from servebook.selection.whatif import assumed_cuda, gpu_from

    env = EngineEnv("sglang", "0.5.9", sys.executable, "/x", "cached", (), "12.9", "sglang Requires-Dist: cuda-python==12.9")
    h200 = gpu_from("h200")
    hw = assumed_cuda(env, h200)
    assert hw["cuda_version"] == "12.9" and "cuda-python" in hw["cuda_source"]
    assert assumed_cuda(env, h200, "12.1")["cuda_version"] == "12.1"
    unpinned = EngineEnv("sglang", "0.5.4", sys.executable, "/x", "cached", (), None, "sglang's Requires-Dist pins no CUDA package")
    assert assumed_cuda(unpinned, h200)["cuda_source"].startswith("ASSUMED")


def test_matrix_diff_compares_only_dynamic_cells():
    from servebook.selection import matrix_diff

    a = [{"gpu": "b200", "model": "m", "method": "dynamic", "attention_backend": "flashinfer"},
         {"gpu": "h200", "model": "m", "method": "static", "attention_backend": None}]
    b = [{"gpu": "b200", "model": "m", "method": "dynamic", "attention_backend": "trtllm_mla"},
         {"gpu": "h200", "model": "m", "method": "dynamic", "attention_backend": "fa3"}]
    d = matrix_diff(a, b)
    assert [(x["gpu"], x["a"], x["b"]) for x in d] == [("b200", {"attention_backend": "flashinfer"}, {"attention_backend": "trtllm_mla"})]
    assert [x["kind"] for x in matrix_diff(a, b, include_unresolved=True)] == ["changed", "not comparable"]


# -- engine environments (slow + envs: build cached venvs, minutes; reused when present) ---------------
# Two SGLang eras: 0.5.9 chooses in ServerArgs.__post_init__ (server_args.py); 0.5.23 in
# ServerArgs.resolve_once() -> arg_groups (model_override_base.py, model_overrides/*.py, platform object).
SGLANG_OLD, SGLANG_NEW = "sglang==0.5.9", "sglang==0.5.23"
VLLM = "vllm==0.33.0"

# EXPECTED VALUES: observed by running each engine's own resolution with servebook's what-if
# (servebook.selection.decision_matrix: ServerArgs(model_path=<config.json only>) under the engine's
# interpreter, GPU faked from data/hardware, kernel libraries as the engine pins them, CUDA from the
# engine's own cuda-python pin: 12.9 for 0.5.9, 13.0 for 0.5.23) on 2026-11-29. Not a table of ours:
# if an engine release changes its rules, re-run `servebook whatif` and update with the new observation.
EXPECTED = {
    # (spec, profile, model): (attention_backend, decided_by file:line)
    (SGLANG_OLD, "rtx-pro-6000", "kimi-k2.5"): ("triton", "sglang/srt/server_args.py:1833"),
    (SGLANG_OLD, "b200", "kimi-k2.5"): ("trtllm_mla", "sglang/srt/server_args.py:1283"),
    (SGLANG_OLD, "h200", "deepseek-v3"): ("fa3", "sglang/srt/server_args.py:1822"),
    (SGLANG_OLD, "b200", "llama-3.1-8b"): ("trtllm_mha", "sglang/srt/server_args.py:1812"),
}
EXPECTED_NEW = {
    (SGLANG_NEW, "rtx-pro-6000", "kimi-k2.5"): ("triton", "sglang/srt/arg_groups/model_override_base.py:351"),
    (SGLANG_NEW, "b200", "kimi-k2.5"): ("trtllm_mla", "sglang/srt/arg_groups/model_overrides/deepseek_v2.py:185"),
    (SGLANG_NEW, "h200", "deepseek-v3"): ("fa3", "sglang/srt/arg_groups/model_override_base.py:338"),
    (SGLANG_NEW, "b200", "llama-3.1-8b"): ("trtllm_mha", "sglang/srt/arg_groups/model_override_base.py:325"),
}
# A case where the two versions disagree, observed the same way: Kimi-K2.5 on B200 keeps the MoE runner
# on "auto" in 0.5.9 and gets "flashinfer_trtllm" in 0.5.23 (the attention backend, trtllm_mla, is the same).
DISAGREE = (("b200", "kimi-k2.5"), "moe_runner_backend", ("auto", "flashinfer_trtllm"))


@pytest.fixture(scope="module")
def sglang_envs():
    from servebook.selection import add_engine

    return {spec: add_engine(spec, progress=None) for spec in (SGLANG_OLD, SGLANG_NEW)}


@pytest.mark.slow
@pytest.mark.envs
def test_sglang_envs_and_static_reading(sglang_envs):
    for spec, env in sglang_envs.items():
        r = read_selection(env.package_dir, "sglang", env.version)
        values = {s.value for s in r.sites if "attention_backend" in s.target or s.target.startswith("return of")}
        assert '"triton"' in values and '"fa3"' in values, spec
        assert "is_sm100_supported" in r.helpers or any("is_sm100" in h for h in r.helpers), spec


@pytest.fixture(scope="module")
def sglang_matrices(sglang_envs):
    """Each version's decision matrix over the GPUs and models of EXPECTED, DISAGREE's cell among them: one engine import
    per GPU and version (30-50 s each on 2 busy cores), asked once for both tests below."""
    from servebook.selection import decision_matrix

    cases = {**EXPECTED, **EXPECTED_NEW}
    (g, m), _field, _values = DISAGREE
    out = {}
    for spec in (SGLANG_OLD, SGLANG_NEW):
        mine = [k for k in cases if k[0] == spec]
        gpus = sorted({k[1] for k in mine} | {g})
        models = sorted({k[2] for k in mine} | {m})
        out[spec] = decision_matrix(spec, gpus, models, workers=2)
    return out


@pytest.mark.slow
@pytest.mark.envs
def test_sglang_resolves_dynamically(sglang_matrices):
    cases = {**EXPECTED, **EXPECTED_NEW}
    for spec in (SGLANG_OLD, SGLANG_NEW):
        mine = {k: v for k, v in cases.items() if k[0] == spec}
        rows = {(r["gpu"], r["model"]): r for r in sglang_matrices[spec]}
        for (_, g, m), (backend, where) in mine.items():
            r = rows[(g, m)]
            assert r["method"] == "dynamic", (spec, g, m, r.get("error"))
            assert (r["attention_backend"], r["decided_by"]) == (backend, where), (spec, g, m, r)


@pytest.mark.slow
@pytest.mark.envs
def test_two_sglang_versions_disagree(sglang_matrices):
    from servebook.selection import matrix_diff

    (g, m), field, (old, new) = DISAGREE
    a, b = ([r for r in sglang_matrices[spec] if (r["gpu"], r["model"]) == (g, m)] for spec in (SGLANG_OLD, SGLANG_NEW))
    assert len(a) == len(b) == 1, (a, b)
    d = matrix_diff(a, b)
    assert len(d) == 1 and field in d[0]["changed"], d
    assert (d[0]["a"][field], d[0]["b"][field]) == (old, new), d


@pytest.mark.slow
@pytest.mark.envs
def test_vllm_static_reading():
    """vLLM's priority lists in platforms/cuda.py, read statically; the what-if answers from them or says why not."""
    from servebook.selection import add_engine

    env = add_engine(VLLM, progress=None, requirements=False)
    r = read_selection(env.package_dir, "vllm", env.version)
    prio = [s for s in r.sites if s.target == "return of _get_backend_priorities"]
    assert prio and all(s.file == "vllm/platforms/cuda.py" for s in prio)
    assert any("TRITON_MLA" in s.value and any("major == 12" in str(c) for c in s.conditions) for s in prio)
    w = whatif(VLLM, "kimi-k2.5", gpu="rtx-pro-6000")
    if w["method"] == "static":  # a static-only environment (built without requirements): the reason and the candidates
        assert w["reason"] and w["candidates"]
    else:  # a full environment: vLLM's own selection ran (tests/test_whatif_vllm.py checks it against vLLM directly)
        assert w["decided_by"]["where"].startswith("vllm/platforms/cuda.py:")


def test_install_plan_takes_runtime_extras_of_old_layouts():
    from servebook.selection.requires import install_plan

    # sglang 0.5.2's METADATA (read from its wheel): the server's requirements sit in the "srt" and
    # "runtime_common" extras; unconditional ones are only aiohttp, requests, tqdm, numpy, IPython, setproctitle.
    requires = ["aiohttp", "numpy", 'sglang[runtime_common]; extra == "srt"', 'torch==2.8.0; extra == "srt"',
                'fastapi; extra == "runtime-common"', 'transformers==4.56.1; extra == "runtime-common"',
                'pytest; extra == "test"', 'uvloop; sys_platform != "win32" and extra == "runtime-common"']
    keep, drop = install_plan(requires)
    assert keep == ["aiohttp", "numpy", "fastapi", "transformers==4.56.1", 'uvloop; sys_platform != "win32"']
    assert drop == ["torch==2.8.0"]
    # newer layouts declare the server unconditionally: extras stay out
    keep, _ = install_plan(["fastapi", 'pytest; extra == "test"', 'xgrammar; extra == "srt"'])
    assert keep == ["fastapi"]


def test_materialize_is_safe_from_threads(tmp_path):
    # The what-if matrix materializes cards from several threads; a shared temporary name once lost a race in CI.
    import os
    import threading

    from servebook.cards import materialize

    errors = []

    def go():
        try:
            materialize("deepseek-v3", root=tmp_path)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    (only,) = os.listdir(tmp_path)
    assert os.listdir(tmp_path / only) == ["config.json"]


# --- chapter 02's page (servebook.selection.figures and .report), on the committed recordings

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


def test_check_yourself_states_the_recorded_case_not_a_failure():
    """h200x1-live recorded its own case as "profile h200" (no "this-host" row): the first answer states that pick,
    tagged, and never "not recorded" beside it; the seed's rule is told as the seed's suspicion, with the book's finding."""
    from servebook.results import RunStore
    from servebook.selection.report import questions
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    store = RunStore(RUNS / "h200x1-live")
    qa = questions(store)
    text = " ".join(a for _, a in qa)
    assert "not recorded" not in text.lower() and "fa3" in text and "h200 (the profile this book fakes)" in qa[0][0]
    assert "the seed's suspicion" in text and "does not explain the gap" in text
    for s in stated_on(text):
        assert pick(QUANTITIES[s.name], QUANTITIES[s.name].compute(store), s.of) == s.value, s


def test_found_lines_print_the_deciding_condition_and_tag_counts(tmp_path):
    """The matrix's MLA rows carry the condition that decided them (0.5.23's `not get_platform().is_sm100`), not only
    file:line; the counts are tagged and recomputed from the tables (a disagreement appended twice counts once)."""
    import shutil

    from servebook.results import RunStore
    from servebook.selection.figures import disagreement_count
    from servebook.selection.report import UNTAGGED, found_lines
    from servebook.stated import stated_on
    from servebook.quantities import QUANTITIES, pick

    shutil.copytree(RUNS / "whatif-rtx-pro-6000-sglang-0.5.9", tmp_path / "run")
    store = RunStore(tmp_path / "run")
    matrices = {}
    for r in store.rows("selection_matrix"):
        matrices.setdefault(r["engine_spec"], []).append(r)
    n = disagreement_count(store)[None]
    for r in store.rows("selection_disagreements")[:1]:
        store.append("selection_disagreements", r)  # executed again: the same rows once more
    assert disagreement_count(store)[None] == n
    text = found_lines(store, None, matrices, [])
    assert "sglang==0.5.23: kimi-k2.5 on rtx-pro-6000" in text and "`not get_platform().is_sm100`" in text
    for s in stated_on(text):
        assert pick(QUANTITIES[s.name], QUANTITIES[s.name].compute(store), s.of) == s.value, s
    assert all(isinstance(v, str) and v for v in UNTAGGED.values())


def test_disagreements_counted_of_the_standing_matrix_only(tmp_path):
    """Chapter 02 executed again on a run appends nothing to the count: the what-if run's tables with an older
    execution's disagreements added beside them (as four executions once left 179 rows there) still give the count of
    the matrix that stands, the one the chapter prints under its side-by-side table (recomputed from
    `selection_matrix`), never a sum over executions."""
    import shutil

    from servebook.results import RunStore
    from servebook.selection.compare import disagreements
    from servebook.selection.figures import diff_count, disagreement_count

    shutil.copytree(RUNS / "whatif-rtx-pro-6000-sglang-0.5.9", tmp_path / "run", ignore=shutil.ignore_patterns("notebooks", "logs"))
    store = RunStore(tmp_path / "run")
    printed = sum(d["kind"] == "differs" for d in disagreements(store.rows("selection_matrix")))
    assert disagreement_count(store)[None] == printed == 10
    assert diff_count(store) == {"sglang==0.5.9 -> sglang==0.5.23": 1}
    for r in store.rows("selection_disagreements"):  # an older execution's rows, each a cell apart from today's
        store.append("selection_disagreements", {**r, "gpu": f"old-{r.get('gpu')}", "recorded_at": "2026-11-30T00:00:00+00:00"})
    assert len({r["recorded_at"] for r in store.rows("selection_disagreements")}) > 1
    assert disagreement_count(store)[None] == printed


def test_disagreements_of_a_replaced_matrix_are_not_counted(tmp_path):
    """A matrix replaced by a later execution takes the rows derived from it out of the count (rows appended by each
    execution, as chapter 02 did before it wrote the table whole)."""
    from servebook.results import RunStore
    from servebook.selection.figures import disagreement_count

    store = RunStore(tmp_path)
    old = {"a": "sglang 0.5.9", "b": "vllm 0.26.0", "kind": "differs", "model": "m", "gpu": "a100", "between": "engines"}
    store.append("selection_disagreements", old | {"recorded_at": "2026-12-01T00:00:01+00:00"})
    store.append("selection_disagreements", old | {"gpu": "h200", "recorded_at": "2026-12-01T00:00:01+00:00"})
    store.replace("selection_matrix", [{"engine_spec": "sglang==0.5.9", "recorded_at": "2026-12-02T00:00:00+00:00"}])
    store.append("selection_disagreements", old | {"gpu": "b200"})
    assert disagreement_count(store) == {None: 1}


def test_a_superseded_answer_is_not_read():
    """vLLM 0.33.0's seed answer was read statically once (2026-12-01T23:13, its environment built without vLLM's
    requirements) and dynamically before and after (the matrix of 2026-12-02 answers TRITON_MLA dynamically): only the
    answer that stands is read, so chapter 06's root cause agrees with chapter 02 (hardware-selected, not unresolved)."""
    from servebook.results import RunStore
    from servebook.standing import standing_answers
    from servebook.selection.rootcause import root_causes

    store = RunStore(RUNS / "whatif-rtx-pro-6000-sglang-0.5.9")
    v33 = [r for r in store.rows("selection") if (r["engine"], r["version"]) == ("vllm", "0.33.0")]
    assert "static" in [r["method"] for r in v33] and v33[-1]["method"] == "dynamic"  # a stale answer among the rows
    standing = [r for r in standing_answers(store) if (r["engine"], r["version"]) == ("vllm", "0.33.0")]
    assert [(r["method"], r["attention_backend"]) for r in standing] == [("dynamic", "TRITON_MLA")]
    assert not [r for r in standing_answers(store) if r["method"] == "static" and (r["engine"], r["version"]) == ("vllm", "0.33.0")]
    causes = {(c["engine"], c["version"]): c["decision"] for c in root_causes(store)}
    assert causes[("vllm", "0.33.0")] == "hardware-selected"
    for run in ("h200x1-live", "h200x2-live", "h200x1-book"):  # nothing superseded there: every answer stands
        other = RunStore(RUNS / run)
        assert standing_answers(other) == other.rows("selection")


def test_an_answer_that_returns_is_recorded_again(tmp_path, monkeypatch):
    """Asked dynamic, then static (a broken environment), then dynamic again: the third answer is recorded, so the
    latest row is the latest answer; asked again unchanged, nothing is added."""
    import importlib

    from servebook.results import RunStore
    from servebook.standing import standing_answers
    from servebook.selection.report import ask

    wi = importlib.import_module("servebook.selection.whatif")

    def answer(method):
        dyn = method == "dynamic"
        return {"engine": "vllm", "version": "0.33.0", "model": "kimi-k2.5", "gpu": "rtx-pro-6000", "capability": "12.0",
                "method": method, "attention_backend": "TRITON_MLA" if dyn else None, "reason": None if dyn else "static only",
                "decided_by": {"where": "vllm/platforms/cuda.py:135", "function": "f", "target": "t", "value": "v"} if dyn else None,
                "conditions": [], "logs": [], "assumptions": {"kernel_libs": {}, "cuda_version": "12.9", "cuda_source": "pin"}}

    store = RunStore(tmp_path)
    for method in ("dynamic", "static", "dynamic", "dynamic"):
        monkeypatch.setattr(wi, "whatif", lambda *a, m=method, **k: answer(m))
        ask(store, "vllm==0.33.0", "kimi-k2.5", "seed", "whatif_seed", gpu="rtx-pro-6000")
    assert [r["method"] for r in store.rows("selection")] == ["dynamic", "static", "dynamic"]
    assert [r["method"] for r in standing_answers(store)] == ["dynamic"]


def test_profiles_are_named_only_where_a_table_holds_them():
    """'Chapter 06 says what the profiles predict' only where chapter 06 has profiles: this run's (h200x1-live), or the
    H200 ones it projects in the seed case's book; elsewhere the sentence says which chapter and run measure them."""
    from servebook.findings import check_yourself
    from servebook.results import RunStore
    from servebook.selection.report import profiles_sentence, questions

    said = {run: profiles_sentence(RunStore(RUNS / run)) for run in
            ("h200x1-live", "whatif-rtx-pro-6000-sglang-0.5.9", "h200x1-trust", "h200x2-live")}
    assert "`profile_runs` and `decode_breakdown`" in said["h200x1-live"]
    assert said["whatif-rtx-pro-6000-sglang-0.5.9"].startswith("Chapter 06 projects") and "h200x1-ref" in said["whatif-rtx-pro-6000-sglang-0.5.9"]
    for run in ("h200x1-trust", "h200x2-live"):
        assert said[run].startswith("No decode-step profile was recorded in this run") and "chapter 05" in said[run]
        assert "data/runs/h200x1-ref" in said[run]
    store = RunStore(RUNS / "h200x2-live")
    for _, a in questions(store) + check_yourself(store, "02"):
        assert "what the profiles predict" not in a
    assert any(said["h200x2-live"] in a for _, a in questions(store))


def test_check_yourself_states_the_answer_that_stands(tmp_path):
    """Chapter 02's questions read the answers that stand: an answer recorded after the matrix replaces the earlier
    one for the same case and question."""
    import shutil

    from servebook.results import RunStore
    from servebook.selection.report import questions

    shutil.copytree(RUNS / "whatif-rtx-pro-6000-sglang-0.5.9", tmp_path / "run")
    store = RunStore(tmp_path / "run")
    assert "(dynamic reading)" in questions(store)[0][1]
    own = next(r for r in store.rows("selection") if r["case"] != "seed")
    store.append("selection", own | {"method": "static", "attention_backend": None, "recorded_at": "2099-01-01T00:00:00+00:00"})
    assert "(static reading)" in questions(store)[0][1]


def test_the_matrix_caption_says_what_its_cells_are(capsys):
    """The what-if book's matrices: a caption counts the cells the engine's own code returned (dynamic) and names
    "(static)" and "(error)" only where such cells are (it once read "(static)" over tables of dynamic answers)."""
    from servebook.results import RunStore
    from servebook.selection.report import matrix_tables

    store = RunStore(Path(__file__).resolve().parents[1] / "data" / "runs" / "whatif-rtx-pro-6000-sglang-0.5.9")
    specs = list(dict.fromkeys(r["engine_spec"] for r in store.rows("selection_matrix")))
    tables = matrix_tables(store, specs, ["a100", "h200", "b200", "rtx-pro-6000"])
    out = capsys.readouterr().out
    for spec, t in tables.items():
        cells = [c for c in t.values.ravel() if isinstance(c, str)]
        static, error = cells.count("(static)"), cells.count("(error)")
        caption = next(line for line in out.splitlines() if line.startswith(f"{spec}: attention backend by model x GPU"))
        assert f"; {len(cells) - static - error} of {len(cells)} cells the backend the engine's own selection code" in caption
        assert ('"(static)"' in caption) == bool(static) and ('"(error)"' in caption) == bool(error), caption
    assert any(t.values.ravel().tolist().count("(static)") == 0 for t in tables.values())  # a matrix of dynamic cells only
