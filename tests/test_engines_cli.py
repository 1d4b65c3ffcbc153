"""Chapter 03 engines: launch flags against the engines' real CLIs, the backend they report, sweep lifecycle.

Fast tests use real strings from the engines' source and real processes; ``envs`` tests use the cached engine
environments (servebook.selection.envs, no GPU dependencies) and the engines' own parsers.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from pathlib import Path

import psutil
import pytest

from servebook.backends import force_each_backend
from servebook.backends.checks import _overridden
from servebook.engines import CLIRejected, EngineAdapter, forcing, get_engine, user_command
from servebook.engines.vllm import attention_mechanism_of, reported_from_log
from servebook.errors import EngineError, ServerError
from servebook.processes import free_port, port_listening
from servebook.results import RunStore
from servebook.servers import Launch, Server, engine_error


# -- what the engines report (strings as the engines' own code formats them) ----------------------------
def test_vllm_log_lines():
    # 0.33.0 vllm/platforms/cuda.py:448  logger.info("Using %s backend.", selected_backend)  (an enum member)
    assert reported_from_log("INFO 11-29 [cuda.py:448] Using %s backend." % "AttentionBackendEnum.FLASH_ATTN") == "FLASH_ATTN"
    # 0.33.0 vllm/platforms/cuda.py:509  automatic choice
    line = "Using %s attention backend out of potential backends: %s." % ("FLASHINFER", "['FLASHINFER', 'TRITON_ATTN']")
    assert reported_from_log("x\n" + line + "\nother") == "FLASHINFER"
    # 0.10.2 vllm/platforms/cuda.py:252 and :322 (human names, V1 engine)
    assert reported_from_log("Using %s backend on V1 engine." % "Triton MLA") == "TRITON_MLA"
    assert reported_from_log("Using Flash Attention backend on V1 engine.") == "FLASH_ATTN"
    # not a backend choice: 0.10.2 cuda.py:342 layout note, 0.33.0 cpu.py:329 SSM storage, vit attention
    assert reported_from_log("Using FlashInfer backend with HND KV cache layout on V1 engine.") is None
    assert reported_from_log("Using %s SSM state storage for the CPU accelerated GDN backend." % "shared") is None
    assert reported_from_log("Using backend TORCH_SDPA for vit attention") is None
    # the env var of 0.10.2 is spelled with the _VLLM_V1 suffix for some members; the same backend
    assert get_engine("vllm").same_backend("TRITON_ATTN_VLLM_V1", "TRITON_ATTN")


def test_sglang_reports_and_overridden():
    sg = get_engine("sglang")
    # /server_info of 0.5.9 is dataclasses.asdict(server_args) (http_server.py:593)
    info = {"_path": "/server_info", "attention_backend": "triton", "prefill_attention_backend": None, "decode_attention_backend": None}
    r = sg.reported_backend(info, "")
    assert (r["attention"], r["prefill"], r["source"]) == ("triton", "triton", "/server_info")
    assert not _overridden(sg, "triton", r)
    # forced flashinfer, the server resolved decode to triton: overridden
    info2 = dict(info, attention_backend="flashinfer", decode_attention_backend="triton")
    assert _overridden(sg, "flashinfer", sg.reported_backend(info2, ""))
    # no endpoint answer: the startup log line (0.5.9 engine.py:156 f"{server_args=}", 0.5.23 engine.py:311 dict form)
    old = "[2026-11-29] server_args=ServerArgs(model_path='/m', prefill_attention_backend=None, attention_backend='fa3', decode_attention_backend=None)"
    new = "[2026-11-29] server_args={'model_path': '/m', 'prefill_attention_backend': 'fa3', 'attention_backend': 'triton'}"
    assert sg.reported_backend(None, old)["attention"] == "fa3"
    r = sg.reported_backend(None, new)
    assert (r["attention"], r["prefill"]) == ("triton", "fa3") and _overridden(sg, "triton", r)
    assert sg.reported_backend(None, "nothing here")["attention"] is None


def test_user_command_is_the_launch_in_paste_form(tmp_path):
    """The command a chapter shows is the adapter's own launch, with the interpreter replaced by the engine's command."""
    import shlex

    sg = get_engine("sglang")
    launch = sg.launch(str(tmp_path), attention="triton", tp=2, check=False)
    assert user_command("sglang", str(tmp_path), attention="triton", tp=2, host="127.0.0.1", port=launch.port) == \
        "python -m sglang.launch_server " + shlex.join(launch.cmd[3:])
    # tp 1, no host or port: the engine's defaults; env sorted and quoted in front; extra arguments last
    assert user_command("sglang", "org/m", tp=2, env={"X": "a b", "NCCL_PROTO": "LL"}, extra_args=["--disable-custom-all-reduce"]) == \
        "NCCL_PROTO=LL X='a b' python -m sglang.launch_server --model-path org/m --tensor-parallel-size 2 --disable-custom-all-reduce"
    assert user_command("sglang", "org/m") == "python -m sglang.launch_server --model-path org/m"
    # vLLM versions not installed here: the variable up to 0.12 (0.12.0 envs.py:652), the flag from 0.13.0 (arg_utils.py:727)
    assert [attention_mechanism_of(v) for v in ("0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.33.0", None)] == \
        ["env", "env", "env", "flag", "flag", "flag"]
    assert user_command("vllm", "org/m", attention="FLASHINFER", tp=2, version="0.10.2") == \
        "VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve org/m --tensor-parallel-size 2"
    assert user_command("vllm==0.13.0", "org/m", attention="FLASHINFER") == "vllm serve org/m --attention-backend FLASHINFER"
    assert forcing("vllm", "TRITON_ATTN", version="0.12.0") == "VLLM_ATTENTION_BACKEND=TRITON_ATTN"
    assert forcing("sglang", "flashinfer", version="0.5.9") == "--attention-backend flashinfer"
    # transformers: the command its launcher wraps, without the options servebook sets for itself; it has no TP flag
    assert user_command("transformers", "m", attention="sdpa", tp=4) == "transformers serve m --attn-implementation sdpa"


def test_engine_error_is_the_engines_own_line():
    tail = "INFO loading\nTraceback (most recent call last):\n  File \"x.py\", line 3\nModuleNotFoundError: No module named 'torchvision'\n"
    assert engine_error(tail) == "ModuleNotFoundError: No module named 'torchvision'"
    assert engine_error("[2026] ERROR scheduler: CUDA out of memory\nbye") == "[2026] ERROR scheduler: CUDA out of memory"
    assert engine_error("all fine") is None


# -- sweep lifecycle with real processes -----------------------------------------------------------------
_MARK = f"servebook-hang-{os.getpid()}-{time.time_ns()}"  # unique: other test runs on the host use sleeps too
_HANG = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {_MARK}']); "
         f"time.sleep(600)  # {_MARK}")
_CRASH = "import sys; print('loading'); print('Traceback (most recent call last):'); print('RuntimeError: no kernel image for this device'); sys.exit(1)"


class _ScriptEngine(EngineAdapter):
    """A stand-in engine whose 'server' for each backend is a small real program (hangs, or crashes)."""

    name = "script"
    package = "servebook"

    def version(self):
        return "0"

    def _command(self, model, *, port, host, attention, tp):
        code = {"hang": _HANG, "crash": _CRASH}[attention]
        return [sys.executable, "-c", code], {}


def _ours(marker):
    return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_sweep_kills_a_hanging_start_continues_and_resumes(embedded_model, tmp_path):
    store = RunStore.open(tmp_path, "local", "lifecycle")
    rows = force_each_backend(_ScriptEngine(), embedded_model, ["hang", "crash"], store, ready_timeout=3, progress=None)
    by = {r["attention"]: r for r in rows}
    assert by["hang"]["outcome"] == "failed to start" and "did not answer" in by["hang"]["server_error"]
    assert by["hang"]["port_free_after"] and not _ours(_MARK)  # the server and its child are gone
    # the sweep went on after the hang; the crash is recorded with the program's own error line
    assert by["crash"]["outcome"] == "failed to start"
    assert by["crash"]["error"] == "RuntimeError: no kernel image for this device"
    # re-run under the same run id: both are skipped, nothing is started again
    said = []
    again = force_each_backend(_ScriptEngine(), embedded_model, ["hang", "crash"], RunStore.at(store.path), ready_timeout=3,
                               progress=said.append)
    assert len(store.rows("backends")) == 2 and [r["outcome"] for r in again] == ["failed to start"] * 2
    assert sum("already measured" in m for m in said) == 2


def test_stale_server_is_reported_not_killed(embedded_model, tmp_path):
    port = free_port()
    code = f"import http.server, socketserver; socketserver.TCPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()"
    stale = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while not port_listening(port) and time.time() < deadline:
            time.sleep(0.1)
        store = RunStore.open(tmp_path, "local", "crashed-before")
        # what an earlier run that crashed left in the registry: started, never stopped
        (store.path / "servers.jsonl").write_text(json.dumps({"event": "started", "pid": stale.pid, "pgid": stale.pid, "port": port,
                                                              "engine": "sglang", "cmd": "python -m sglang.launch_server", "time": 0}) + "\n")
        said = []
        force_each_backend(_ScriptEngine(), embedded_model, [], store, progress=said.append)
        (row,) = store.rows("stale_servers")
        assert (row["pid"], row["port"], row["action"]) == (stale.pid, port, "reported, not stopped")
        assert any(f"pid {stale.pid}" in m and "leaves it alone" in m for m in said)
        assert stale.poll() is None and port_listening(port)  # still running: not killed blindly
        # starting a server on its port is refused, naming who holds it, without touching it
        with pytest.raises(ServerError, match=f"pid {stale.pid}") as info:
            Server.start(Launch(cmd=[sys.executable, "-c", "pass"], port=port), tmp_path / "log", progress=None)
        assert "does not stop programs it did not start" in str(info.value) and stale.poll() is None
    finally:
        os.killpg(stale.pid, signal.SIGKILL)
        stale.wait()


# -- the engines' real CLIs (cached environments) ---------------------------------------------------------
def _env_python(spec):
    from servebook.engines.envs import resolve_engine

    try:
        return resolve_engine(spec).python
    except EngineError:
        from servebook.selection import add_engine

        return add_engine(spec, progress=None, requirements=not spec.startswith("vllm==0.33")).python


@pytest.mark.slow
@pytest.mark.envs
def test_sglang_flags_against_two_real_clis(embedded_model, tmp_path):
    old = get_engine("sglang==0.5.9", python=_env_python("sglang==0.5.9"))
    new = get_engine("sglang==0.5.23", python=_env_python("sglang==0.5.23"))
    assert get_engine("sglang==0.5.9").python == old.python  # a pinned spec finds its prepared environment
    for eng in (old, new):
        assert eng.cli_options()["method"] == "parser"
        launch = eng.launch(str(tmp_path), attention="triton")  # every flag checked against this version's parser
        assert launch.cmd[3:] == ["--model-path", str(tmp_path), "--host", "127.0.0.1", "--port", str(launch.port),
                                  "--tensor-parallel-size", "1", "--attention-backend", "triton"]
        assert "triton" in eng.attention_choices()
    # observed in the two parsers: cutlass_mla is a choice of 0.5.9's --attention-backend, not of 0.5.23's
    old.launch(str(tmp_path), attention="cutlass_mla")
    with pytest.raises(CLIRejected, match=r"sglang 0\.5\.23 does not accept --attention-backend cutlass_mla: its parser allows .*triton"):
        new.launch(str(tmp_path), attention="cutlass_mla")
    # and --cuda-graph-max-bs is an option of 0.5.9 that 0.5.23's parser no longer defines
    old.launch(str(tmp_path), extra=["--cuda-graph-max-bs", "8"])
    with pytest.raises(CLIRejected, match=r"sglang 0\.5\.23 has no option --cuda-graph-max-bs .*use a version that has it"):
        new.launch(str(tmp_path), extra=["--cuda-graph-max-bs", "8"])
    # in the sweep: recorded as rejected before anything starts, the sweep goes on
    store = RunStore.open(tmp_path, "local", "sglang-cli")
    (row,) = force_each_backend(new, embedded_model, ["cutlass_mla"], store, progress=None)
    assert row["outcome"] == "rejected" and "sglang 0.5.23 does not accept --attention-backend cutlass_mla" in row["error"]
    assert "launch" not in row and not (store.path / "logs").exists()


@pytest.mark.slow
@pytest.mark.envs
def test_vllm_0102_takes_the_env_var(tmp_path):
    # 0.10.2: its own parser (built in its interpreter) has no --attention-backend; envs.py reads VLLM_ATTENTION_BACKEND
    old = get_engine("vllm==0.10.2", python=_env_python("vllm==0.10.2"))
    cli = old.cli_options()
    assert cli["method"] == "parser" and "--attention-backend" not in cli["options"]
    assert old.attention_mechanism() == "env"
    launch = old.launch(str(tmp_path), attention="FLASHINFER")
    assert launch.env == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"} and "--attention-backend" not in launch.cmd
    assert launch.cmd[3:6] == ["serve", str(tmp_path), "--host"]
    with pytest.raises(CLIRejected, match="vllm 0.10.2 has no attention backend NO_SUCH"):
        old.launch(str(tmp_path), attention="NO_SUCH")
    with pytest.raises(EngineError, match=r"vllm 0\.10\.2 has no option --attention-backend"):
        old.launch(str(tmp_path), extra=["--attention-backend", "FLASHINFER"])
    # the source reading used where the parser cannot be built adds no option the real parser lacks
    static = old._static_cli()["options"]
    assert {"--model", "--host", "--port", "--tensor-parallel-size"} <= set(static)
    assert set(static) <= set(cli["options"]), sorted(set(static) - set(cli["options"]))


@pytest.mark.slow
@pytest.mark.envs
def test_vllm_033_takes_the_flag(tmp_path):
    # 0.33.0 (cached without its requirements: its parser cannot be built here, its source is read): the flag
    new = get_engine("vllm==0.33.0", python=_env_python("vllm==0.33.0"))
    assert new.cli_options()["method"] in ("parser", "source")
    assert new.attention_mechanism() == "flag"
    launch = new.launch(str(tmp_path), attention="TRITON_ATTN")
    assert launch.cmd[-2:] == ["--attention-backend", "TRITON_ATTN"] and "VLLM_ATTENTION_BACKEND" not in launch.env
    with pytest.raises(CLIRejected, match=r"vllm 0\.33\.0 has no option --no-such-flag"):
        new.launch(str(tmp_path), extra=["--no-such-flag"])
    # spellings vLLM's FlexibleArgumentParser accepts: underscores, and a key of a config option
    new.launch(str(tmp_path), extra=["--max_model_len", "512", "--attention-config.flash_attn_version", "3"])


@pytest.mark.slow
@pytest.mark.envs
def test_forced_sglang_without_gpu_fails_to_start_with_its_own_error(embedded_model, tmp_path):
    eng = get_engine("sglang==0.5.9", python=_env_python("sglang==0.5.9"))
    store = RunStore.open(tmp_path, "local", "sglang-cpu")
    (row,) = force_each_backend(eng, embedded_model, ["triton"], store, ready_timeout=240, progress=None)
    assert row["outcome"] == "failed to start", row
    assert "exited with code" in row["server_error"]
    # the recorded error is SGLang's own last line, and it is in the server's log
    log = (store.path / "logs" / "sglang-triton.log").read_text()
    assert row["error"] != row["server_error"] and row["error"] in log and row["error"] == engine_error(log)
    assert "--attention-backend triton" in row["launch"] and row["port_free_after"]


# -- a backend that fails at its first decode while the engine lingers (SGLang waits ~60 s for core dumps) ------
_FIRST_DECODE_CRASH = r'''
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def do_POST(self):
        print("[scheduler] Scheduler hit an exception: Traceback (most recent call last):", flush=True)
        print("RuntimeError: cutlass_mla_decode is only supported on compute capability 10.0, but found sm version 90", flush=True)
        time.sleep(600)  # the request never answers; the process lingers
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


class _FirstDecodeCrash(EngineAdapter):
    name = "script"
    package = "servebook"
    fatal_log = r"[^\n]*Scheduler hit an exception[^\n]*"

    def version(self):
        return "0"

    def _command(self, model, *, port, host, attention, tp):
        return [sys.executable, "-c", _FIRST_DECODE_CRASH, str(port)], {}


def test_a_crash_at_first_decode_does_not_hold_the_sweep(embedded_model, tmp_path):
    store = RunStore.open(tmp_path, "local", "first-decode")
    t0 = time.monotonic()
    (row,) = force_each_backend(_FirstDecodeCrash(), embedded_model, ["cutlass_mla"], store, ready_timeout=30, progress=None)
    assert row["outcome"] == "crashed"
    assert row["error"].startswith("RuntimeError: cutlass_mla_decode is only supported")  # the engine's own line
    assert time.monotonic() - t0 < 40 and row["port_free_after"]  # not the 120 s request timeout, nor the linger


def test_teacher_forced_agreement_tolerates_one_flipped_argmax():
    from servebook.backends import teacher_forced_agreement

    ref = [{"tokens": list("abcdef"), "lp": [None, -1.0, -1.0, -1.0, -1.0, -1.0], "top": [None, "b", "c", "x", "e", "f"]}]
    one_flip = [{"tokens": list("abcdef"), "lp": [None, -1.0, -1.1, -1.0, -1.0, -1.2], "top": [None, "b", "c", "y", "e", "f"]}]
    got = teacher_forced_agreement(ref, one_flip)
    assert got["tf_top1_agreement"] == 0.8 and got["tf_positions"] == 5 and got["tf_logprob_mad"] == pytest.approx(0.06)
    assert teacher_forced_agreement(ref, {"unsupported": "no echo"})["tf_top1_agreement"] is None


_TWO_SWEEPS = r'''
import concurrent.futures as cf, sys
sys.path.insert(0, sys.argv[3])
from test_engines_cli import _ScriptEngine
from servebook.backends import force_each_backend
from servebook.results import RunStore
store = RunStore.open(sys.argv[2], "local", "two")
with cf.ThreadPoolExecutor(2) as pool:  # transformers is not imported yet in this interpreter: both threads race for it
    futs = [pool.submit(force_each_backend, _ScriptEngine(), sys.argv[1], ["crash"], store, ready_timeout=5, progress=None) for _ in range(2)]
    print([f.result()[0]["outcome"] for f in futs])
'''


def test_two_sweeps_in_threads_of_a_fresh_interpreter(embedded_model, tmp_path):
    """Chapter 03 sweeps two engines from threads (one per GPU); on an H200 the second died importing transformers."""
    out = subprocess.run([sys.executable, "-c", _TWO_SWEEPS, str(embedded_model), str(tmp_path), os.path.dirname(__file__)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['failed to start', 'failed to start']"


def test_a_host_named_interpreter_answers_a_spec_no_prepared_env_holds(tmp_path, host_named_sglang):
    """On a GPU host whose engine lives in its own interpreter (SERVEBOOK_PYTHON_SGLANG), `sglang==V` resolves to that
    interpreter when it holds V (chapter 05's bench_serving ceiling asks this way), and is not claimed for another V."""
    from servebook.errors import EngineError
    from servebook.engines.envs import resolve_engine

    site, py = host_named_sglang(metadata="Requires-Dist: torch==2.11.0\n")
    env = resolve_engine("sglang==0.5.16")
    assert (env.python, env.version, env.source) == (str(py), "0.5.16", "engine-python")
    assert env.package_dir == str(site / "sglang")
    with pytest.raises(EngineError, match="sglang==0.5.9 is not prepared"):
        resolve_engine("sglang==0.5.9")


_FAKE_VLLM = {
    "vllm/__init__.py": "",
    "vllm/platforms/__init__.py": '''
import collections
Cap = collections.namedtuple("Cap", "major minor")
class _P:
    def get_device_capability(self):
        return Cap(9, 0)
    def get_attn_backend_cls(self, selected, sel, heads):
        from vllm.v1.attention.backends.registry import AttentionBackendEnum as E
        for m in (E.FLASHINFER_MLA, E.FLASH_ATTN_MLA):  # vLLM walks its priority list through the same checks
            if not m.get_class().validate_configuration(device_capability=self.get_device_capability(), **sel._asdict()):
                return m.value
current_platform = _P()
''',
    "vllm/v1/__init__.py": "", "vllm/v1/attention/__init__.py": "", "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/selector.py": '''
import collections
AttentionSelectorConfig = collections.namedtuple("AttentionSelectorConfig", "head_size dtype kv_cache_dtype block_size use_mla")
''',
    "vllm/v1/attention/backends/registry.py": '''
import enum
class FlashAttnMLA:
    @classmethod
    def validate_configuration(cls, device_capability, **kw):
        return []
class FlashInferMLA:  # 0.26.0: supports_combination reads the current config, and asserts without one
    @classmethod
    def validate_configuration(cls, device_capability, **kw):
        from vllm.config import get_current_vllm_config
        get_current_vllm_config()
        return [] if device_capability.major == 10 else ["compute capability not supported"]
class AttentionBackendEnum(enum.Enum):
    FLASH_ATTN_MLA = "x.FlashAttnMLA"
    FLASHINFER_MLA = "x.FlashInferMLA"
    def get_class(self):
        return {"FLASH_ATTN_MLA": FlashAttnMLA, "FLASHINFER_MLA": FlashInferMLA}[self.name]
''',
}
_FAKE_VLLM_CONFIG = {
    "with": '''
import contextlib
_cur = None
class VllmConfig:
    model_config = None
def get_current_vllm_config():
    assert _cur is not None, "Current vLLM config is not set."
    return _cur
@contextlib.contextmanager
def set_current_vllm_config(c):
    global _cur
    old, _cur = _cur, c
    try:
        yield
    finally:
        _cur = old
''',
    "without": '''
def get_current_vllm_config():
    raise AssertionError("Current vLLM config is not set.")
''',
}


@pytest.mark.parametrize("layout", ["with", "without"])
def test_vllm_preflight_counts_only_the_engines_own_refusals(tmp_path, layout):
    """On an H200, vLLM 0.26.0's FLASHINFER_MLA check asserted because the preflight set no vLLM config; the harness
    filed that as vLLM refusing the backend (h200x1-live). Now the checks run inside vLLM's config context, where
    the backend gives its own reason, and a harness fault (an AssertionError) is 'cannot judge': it is started."""
    from servebook.engines import _base

    site = tmp_path / "site"
    for rel, text in {**_FAKE_VLLM, "vllm/config/__init__.py": _FAKE_VLLM_CONFIG[layout]}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_attention_heads": 64}))
    script = Path(_base.__file__).parent / "launchers" / "preflight.py"
    p = subprocess.run([sys.executable, str(script), "vllm", json.dumps({"model": str(model), "backends": ["FLASH_ATTN_MLA", "FLASHINFER_MLA"]})],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=120)
    line = next(l for l in p.stdout.splitlines() if l.startswith("SERVEBOOK_PREFLIGHT "))
    res = json.loads(line.split(" ", 1)[1])["results"]
    assert res["FLASH_ATTN_MLA"]["ok"] is True
    if layout == "with":
        assert res["FLASHINFER_MLA"] == {"ok": False, "error": "vLLM's FlashInferMLA.validate_configuration: compute capability not supported"}
        assert res["auto"]["resolved"]["attention_backend"] == "FLASH_ATTN_MLA"
    else:
        assert res["FLASHINFER_MLA"]["ok"] is None and "AssertionError" in res["FLASHINFER_MLA"]["error"]
        assert res["auto"]["ok"] is None
