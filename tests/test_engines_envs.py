"""Which prepared engine environment answers (servebook.engines.envs.resolve_engine, engines.get_engine) when a
static-only build is among them: CI prepares sglang 0.5.16 from the engine alone (tests/test_mla_launch.py,
STATIC_BUILDS) and vllm 0.33.0 likewise (tests/test_engines_cli.py), to read their source. Such a build is never picked
where the engine must import; static readers still get it. The environments here are fakes in tmp_path's cache: a
wrapper of this Python whose path holds a package of the version, and the metadata add_engine writes."""

import json
import sys

import pytest

from servebook.engines import get_engine
from servebook.engines.envs import StaticOnlyBuild, _env_dir, is_static_only, list_engines, resolve_engine
from servebook.errors import EngineError

# the init of a static-only build: its requirements are absent, so importing it fails as a real one does
_NO_REQUIREMENTS = "import a_requirement_not_installed  # noqa\n"


@pytest.fixture
def prepare(tmp_path, monkeypatch):
    """``prepare(engine, version, static)``: a prepared environment in tmp_path's cache, as ``add_engine`` leaves it
    (``static``: built with ``requirements=False``); returns its python."""
    monkeypatch.setenv("SERVEBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SERVEBOOK_PYTHON_SGLANG", raising=False)
    monkeypatch.delenv("SERVEBOOK_PYTHON_VLLM", raising=False)

    def make(engine: str, version: str, static: bool, files: dict | None = None) -> str:
        d = _env_dir(engine, version)
        site = d / "site"
        for rel, text in {f"{engine}/__init__.py": _NO_REQUIREMENTS if static else "", **(files or {})}.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        dist = site / f"{engine}-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {engine}\nVersion: {version}\n")
        py = d / "bin" / "python"
        py.parent.mkdir(parents=True)
        py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
        py.chmod(0o755)
        why = f"static-only environment: built without the engine's requirements; `servebook engines add {engine}=={version} --force` builds one that resolves"
        meta = {"engine": engine, "version": version, "python": str(py), "package_dir": str(site / engine), "cuda": None,
                "cuda_source": "", "stubs": [], "requires_installed": [] if static else ["requests"],
                "importable": not static, "import_error": why if static else None}
        (d / "servebook_env.json").write_text(json.dumps(meta))
        return str(py)

    return make


def test_a_bare_name_takes_the_newest_full_build_over_a_newer_static_only_one(prepare):
    full = prepare("sglang", "0.5.9", static=False)
    static = prepare("sglang", "0.5.16", static=True)
    env = resolve_engine("sglang")
    assert (env.version, env.python, env.static_only) == ("0.5.9", full, False)
    # a reader of the engine's files still gets the newest, and knows what it got
    env = resolve_engine("sglang", static=True)
    assert (env.version, env.python, env.static_only) == ("0.5.16", static, True)


def test_static_only_builds_alone_are_refused_in_one_line_that_names_them_and_the_fix(prepare):
    prepare("sglang", "0.5.16", static=True)
    prepare("sglang", "0.5.2", static=True)
    with pytest.raises(StaticOnlyBuild) as info:
        resolve_engine("sglang")
    msg = str(info.value)
    assert "\n" not in msg
    assert "sglang==0.5.2, sglang==0.5.16 are static-only builds" in msg
    assert "servebook engines add sglang==0.5.16 --force" in msg  # the newest, rebuilt with its requirements
    assert isinstance(info.value, EngineError)  # callers that catch an engine error still do
    assert resolve_engine("sglang", static=True).version == "0.5.16"


def test_nothing_prepared_still_says_so(prepare):
    with pytest.raises(EngineError, match="no environment is prepared; run: servebook engines add sglang==VERSION") as info:
        resolve_engine("sglang")
    assert not isinstance(info.value, StaticOnlyBuild)


def test_a_host_named_interpreter_answers_before_a_static_only_build(prepare, host_named_sglang):
    prepare("sglang", "0.5.16", static=True)
    site, py = host_named_sglang(version="0.5.23")  # the same cache (tmp_path/cache), and SERVEBOOK_PYTHON_SGLANG set
    assert [e["version"] for e in list_engines()] == ["0.5.16"]
    env = resolve_engine("sglang")
    assert (env.python, env.version, env.source) == (str(py), "0.5.23", "engine-python")


def test_a_version_asked_by_name_is_returned_and_marked(prepare):
    """Readers of one version's source ask it by name (profile.ranges, test_mla_launch's 0.5.16): they get it."""
    static = prepare("sglang", "0.5.16", static=True)
    env = resolve_engine("sglang==0.5.16")
    assert (env.python, env.static_only, env.source) == (static, True, "cached")
    assert env.import_error.startswith("static-only environment")


def test_the_adapter_refuses_to_start_a_server_in_a_static_only_build(prepare, tmp_path):
    full = prepare("sglang", "0.5.9", static=False)
    static = prepare("sglang", "0.5.16", static=True)
    assert get_engine("sglang").python == full and get_engine("sglang").static_only is None
    eng = get_engine("sglang==0.5.16")
    assert eng.python == static and eng.version() == "0.5.16"  # its files are still read
    for call in (lambda: eng.launch(str(tmp_path), attention="triton"), eng.require, eng.cli_options, eng.attention_choices):
        with pytest.raises(StaticOnlyBuild) as info:
            call()
        msg = str(info.value)
        assert "\n" not in msg and f"sglang==0.5.16 at {static} is a static-only build" in msg
        assert msg.endswith("servebook engines add sglang==0.5.16 --force (or pass --engine-python)")
    got = eng.preflight(str(tmp_path), {"triton": ["--attention-backend", "triton"]})
    assert got["results"] == {} and "static-only build" in got["error"]
    # an interpreter passed by the caller is the caller's choice: nothing is refused up front
    assert get_engine("sglang==0.5.16", python=static).static_only is None


def test_only_static_only_builds_give_an_adapter_that_reads_but_does_not_start(prepare, tmp_path):
    static = prepare("sglang", "0.5.16", static=True)
    eng = get_engine("sglang")
    assert eng.python == static and eng.version() == "0.5.16"
    with pytest.raises(StaticOnlyBuild, match="servebook engines add sglang==0.5.16 --force"):
        eng.launch(str(tmp_path))


def test_vllm_options_are_still_read_from_a_static_only_builds_source(prepare):
    """vLLM's adapter reads a static-only build's options from its source (VLLMEngine._static_cli): refusing its
    parser there must leave that reading as it was."""
    args = 'def add(parser):\n    parser.add_argument("--attention-backend", type=str)\n    parser.add_argument("--enforce-eager", action="store_true")\n'
    prepare("vllm", "0.33.0", static=True, files={"vllm/engine/arg_utils.py": args})
    cli = get_engine("vllm==0.33.0").cli_options()
    assert cli["method"] == "source" and {"--attention-backend", "--enforce-eager"} <= set(cli["options"])
    assert "static-only build" in cli["parser_error"]  # why the parser was not built: said, not a traceback's last line


def test_only_a_build_without_requirements_is_static_only():
    """A full build whose import failed (add_engine's _reprobe asks it again later) is not a static-only build."""
    assert is_static_only({"importable": False, "requires_installed": [], "import_error": "static-only environment: ..."})
    assert not is_static_only({"importable": False, "requires_installed": ["torch"], "import_error": "No module named x"})
    assert not is_static_only({"importable": True, "requires_installed": []})
    assert not is_static_only({"version": "0.5.9"})  # recorded before servebook wrote these fields
