"""Fault drills: provoke what real hosts do to a run, and check the book survives it and loses nothing.

Each drill causes a real fault (SIGKILL, a crashed or hung server, a taken port, a full disk,
hostile parameters, secrets in the environment) and asserts the recorded outcome. docs/drills.md
lists them with the outcome each asserts. SSH faults are drilled in tests/test_hosts.py.

    make test ARGS='-m drills'
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from servebook.errors import ParameterError
from servebook.processes import free_port, port_listening
from servebook.results import RunStore
from servebook.servers import Launch, leftover_servers

pytestmark = pytest.mark.drills

ROOT = Path(__file__).resolve().parents[1]
SERVEBOOK = [sys.executable, "-m", "servebook.cli"]
SECRETS = {  # what a GPU host's shell typically carries; none of these values may reach a file of the run
    "HF_TOKEN": "hf_DrillSecretValue0123456789",
    "NCCL_IB_PASSWORD": "drillNcclPw-8842-zz",
    "SSHPASS": "drillSshPw-1337-qq",
}


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "lib") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmd(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def _wait(cond, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _events(registry: Path) -> list[dict]:
    if not registry.exists():
        return []
    return [json.loads(line) for line in registry.read_text().splitlines() if line.strip()]


def _jsonl_lines_whole(path: Path) -> list[dict]:
    """Every line of a table parses: no row was torn or fused with another."""
    text = path.read_text()
    assert text == "" or text.endswith("\n"), f"{path.name} ends mid-line"
    return [json.loads(line) for line in text.splitlines()]


# ---------------------------------------------------------------------------------------------
# kill -9 of the book mid-sweep, then resume with the same run id (and secrets in the environment)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, embedded_model):
    """`servebook book --only 03` SIGKILLed (its whole process group) while chapter 03's second server
    starts, then the same run id resumed with chapters 01 and 03; HF_TOKEN and passwords set throughout."""
    root = tmp_path_factory.mktemp("kill9")
    run_id = "drill-kill9"
    cmd = SERVEBOOK + ["book", "--smoke", "--run-id", run_id, "--runs", str(root / "runs"), "--out", str(root / "site"),
                       "-p", "max_tokens=8", "-p", "runs=2"]
    env = _env(**SECRETS)
    log1 = open(root / "book-killed.log", "w")
    book = subprocess.Popen(cmd + ["--only", "03"], stdout=log1, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                            start_new_session=True)
    run_dir = root / "runs" / f"local-{socket.gethostname()}" / run_id
    registry = run_dir / "servers.jsonl"
    try:
        second_started = _wait(lambda: len([e for e in _events(registry) if e["event"] == "started"]) >= 2
                               and len(RunStore(run_dir).rows("backends")) >= 1, timeout=300, step=0.5)
        assert second_started, (root / "book-killed.log").read_text()[-3000:]
        tree = [p.pid for p in psutil.Process(book.pid).children(recursive=True)]
        os.killpg(book.pid, signal.SIGKILL)  # the book's own process and its group, as `kill -9 -PGID` would
        book.wait(timeout=30)
    finally:
        if book.poll() is None:
            os.killpg(book.pid, signal.SIGKILL)
        log1.close()
    # The kernel notices its parent is gone, the reaper then stops the server's group.
    gone = _wait(lambda: not any(_alive(p) for p in tree) and not leftover_servers(registry), timeout=60)
    # read once nothing of the killed book runs: a measurement can still finish between the wait above and the kill, and
    # the kernel (a session of its own, outside the killed group) can finish one before it notices (both seen on CI)
    rows_at_kill = RunStore(run_dir).rows("backends")
    left_after_kill = [(p, _cmd(p)[:200]) for p in tree if _alive(p)]
    servers_after_kill = leftover_servers(registry)
    t0 = time.monotonic()
    resumed = subprocess.run(cmd + ["--only", "01,03"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=420)
    return {
        "root": root, "run_dir": run_dir, "registry": registry, "rows_at_kill": rows_at_kill, "killed_rc": book.returncode,
        "gone": gone, "left_after_kill": left_after_kill, "servers_after_kill": servers_after_kill,
        "resumed": resumed, "resume_s": time.monotonic() - t0,
    }


@pytest.mark.timeout(900)
def test_kill9_mid_sweep_leaves_no_server_behind(killed_and_resumed):
    k = killed_and_resumed
    assert k["killed_rc"] == -signal.SIGKILL
    assert k["gone"], f"left running after kill -9 of the book: {k['left_after_kill']} servers {k['servers_after_kill']}"
    assert not k["servers_after_kill"]
    # and after the resumed run, nothing it started is running either
    assert not leftover_servers(k["registry"])
    assert all(not port_listening(e["port"]) for e in _events(k["registry"]))


@pytest.mark.timeout(900)
def test_kill9_then_resume_keeps_every_measurement_and_measures_nothing_twice(killed_and_resumed):
    k = killed_and_resumed
    assert k["resumed"].returncode == 0, k["resumed"].stderr[-3000:]
    assert "(resuming)" in k["resumed"].stdout
    store = RunStore(k["run_dir"])
    rows = _jsonl_lines_whole(store.table_path("backends"))
    before = k["rows_at_kill"]
    assert before and rows[: len(before)] == before  # finished measurements kept as they were
    labels = [(r["engine"], r["attention"]) for r in rows]
    assert len(labels) == len(set(labels)), f"measured twice: {labels}"
    assert {a for _, a in labels} == {"auto", "eager"}
    assert all(r["outcome"] == "ok" for r in rows), rows
    # The resumed run started only the servers whose measurement had not finished at the kill (eager, unless it finished
    # in the moment before the kill): auto was not started again.
    starts = [e for e in _events(k["registry"]) if e["event"] == "started"]
    auto_starts = [e for e in starts if "--attn-implementation" not in e["cmd"]]
    unfinished = {"auto", "eager"} - {r["attention"] for r in before}
    assert "auto" not in unfinished and len(auto_starts) == 1, [e["cmd"][-40:] for e in starts]
    assert len(starts) == 2 + len(unfinished), ([e["cmd"][-40:] for e in starts], unfinished)
    assert len(store.manifest.get("resumptions", [])) == 1


@pytest.mark.timeout(900)
def test_secrets_in_the_environment_reach_no_file_of_the_run(killed_and_resumed):
    k = killed_and_resumed
    assert k["resumed"].returncode == 0, k["resumed"].stderr[-3000:]
    scanned, found = 0, []
    texts = [("stdout", k["resumed"].stdout), ("stderr", k["resumed"].stderr)]
    for path in sorted(k["root"].rglob("*")):
        if path.is_file():
            texts.append((str(path.relative_to(k["root"])), path.read_bytes().decode("utf-8", errors="replace")))
    for name, text in texts:
        scanned += 1
        for var, secret in SECRETS.items():
            if secret in text:
                found.append((name, var))
    assert not found, f"secret values written to: {found}"
    files = {n for n, _ in texts}
    # the scan saw the rendered book, the executed notebooks, the tables and the server logs
    assert any(n.startswith("site/") and n.endswith(".html") for n in files)
    assert any(n.endswith("01_detect_capabilities.ipynb") for n in files)
    assert any("/logs/" in n for n in files) and any(n.endswith("backends.jsonl") for n in files)
    # chapter 01 shows the NCCL/HF environment: the variables are there, masked
    probe_nb = next(t for n, t in texts if n.endswith("01_detect_capabilities.ipynb"))
    assert "NCCL_IB_PASSWORD" in probe_nb and "HF_TOKEN" in probe_nb


# ---------------------------------------------------------------------------------------------
# torchrun-style bounded launches: kill -9 of their parent stops the workers
# ---------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["torchrun", "forking"])
def test_kill9_of_the_parent_stops_bounded_launches(tmp_path, launcher):
    """Chapter 04's torchrun launches (servebook.processes.run_bounded) die with the process that started them."""
    worker = tmp_path / "worker.py"
    worker.write_text("import os, subprocess, sys, time\n"
                      "if len(sys.argv) > 1: subprocess.Popen([sys.executable, __file__])\n"
                      "time.sleep(600)\n")
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()), str(worker)]
           if launcher == "torchrun" else [sys.executable, str(worker), "fork"])
    driver = f"import sys\nfrom servebook.processes import run_bounded\nrun_bounded({cmd!r}, timeout=600)\n"
    parent = subprocess.Popen([sys.executable, "-c", driver], env=_env(OMP_NUM_THREADS="1"), start_new_session=True)
    try:
        def tree():
            return [p for p in psutil.Process(parent.pid).children(recursive=True) if str(worker) in _cmd(p.pid)]
        want = 3 if launcher == "torchrun" else 2  # agent + 2 workers; a worker and its child
        assert _wait(lambda: len(tree()) >= want, timeout=90), "the launch did not start its workers"
        everything = [p.pid for p in tree()]
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait(lambda: not any(_alive(p) for p in everything), timeout=30), \
            [_cmd(p) for p in everything if _alive(p)]
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        for pid in [p.pid for p in psutil.process_iter(["cmdline"]) if str(worker) in " ".join(p.info["cmdline"] or [])]:
            os.kill(pid, signal.SIGKILL)  # only what this test started


@pytest.mark.timeout(60)
def test_a_timed_out_launch_leaves_no_worker_of_another_session(tmp_path):
    """torchrun starts each worker in a session of its own and stops them from its SIGTERM handler. A launcher that
    does not (here: it ignores SIGTERM, so the group's SIGKILL ends it first) must not leave its worker running: on CI a
    gloo worker of chapter 04's hang drill outlived its timed-out launch this way."""
    from servebook.processes import run_bounded

    marker = tmp_path / "worker.pid"
    launcher = tmp_path / "launcher.py"
    launcher.write_text("import signal, subprocess, sys, time\n"
                        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                        f"w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
                        f"open({str(marker)!r}, 'w').write(str(w.pid))\n"
                        "time.sleep(600)\n")
    res = run_bounded([sys.executable, str(launcher)], timeout=3)
    assert res.returncode == 124
    pid = int(marker.read_text())
    try:
        assert not _alive(pid), "the worker outlived its launch"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# the engine server crashes mid-benchmark
# ---------------------------------------------------------------------------------------------
@pytest.mark.timeout(400)
def test_server_crash_mid_benchmark_is_a_finding_of_chapter_05(embedded_model, tmp_path, no_engine_envs):
    """Chapter 05 run by the book; its engine server is SIGKILLed as it answers the first warm-up request. The book runs as on CI
    (no_engine_envs): where SGLang 0.5.9 is cached, its client ceiling would add sglang.bench_serving, not what this drills."""
    from servebook.book import run_book

    root = tmp_path
    run_dir = RunStore.open(root / "runs", host="local", run_id="crash05").path
    registry = run_dir / "servers.jsonl"
    killed: list[dict] = []

    def first_request_served() -> bool:
        # the server's own access line for the first POST: a warm-up request (the model list before it is a GET). The
        # warm-up rows are written only after all warm-ups ended, so waiting for them raced the single stream on CI.
        log = run_dir / "server-transformers.log"
        return log.exists() and "POST /v1/" in log.read_text(errors="replace")

    def kill_after_warmup():
        if _wait(first_request_served, 300, 0.02):
            server = [e for e in _events(registry) if e["event"] == "started"][0]
            os.killpg(server["pgid"], signal.SIGKILL)  # the engine dies as under the OOM killer
            killed.append(server)

    killer = threading.Thread(target=kill_after_warmup, daemon=True)
    killer.start()
    result = run_book({"smoke": True}, out=root / "site", runs_root=root / "runs", run_id="crash05", only=["05"],
                      # no profile: the drill is the crash; six warm-up requests, so the kill at the first one's access
                      # line lands before the single stream begins even on a loaded host
                      extra={"max_tokens": 8, "profile_steps": 0, "warmup": 6}, progress=None)
    killer.join(5)
    assert killed, "the server was never killed"
    assert result.chapters[0]["status"] == "ok", result.chapters  # the book went on
    store = RunStore(run_dir)
    assert not leftover_servers(registry) and not port_listening(killed[0]["port"])
    # every request after the crash is a recorded failure naming the server
    failures = [f for f in store.rows("failures") if f["step"] == "bench_request"]
    url = f"http://127.0.0.1:{killed[0]['port']}"
    assert len(failures) >= 3 and all(url in f["error"] or "connection" in f["error"].lower() for f in failures), failures
    summary = store.rows("bench_summary")
    single = [r for r in summary if r["phase"] == "single"]
    sweep = [r for r in summary if r["phase"] == "sweep"]
    assert single and single[0]["ok"] == 0 and single[0]["failed"] >= 1
    assert [r["concurrency"] for r in sweep] == [1, 2] and all(r["ok"] == 0 for r in sweep)  # the sweep moved on
    # the chapter's own findings say it
    nb = (run_dir / "notebooks" / "05_benchmark_single_stream.ipynb").read_text()
    assert "no request succeeded" in nb and "recorded failures" in nb
    # the benchmark command against the dead server: one line, exit 2
    res = subprocess.run(SERVEBOOK + ["bench", "--url", url, "--tokenizer", str(embedded_model), "--runs", "1", "--warmup", "0",
                                      "--out", str(tmp_path / "cli")], capture_output=True, text=True, env=_env(), timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and url in res.stderr


@pytest.mark.timeout(300)
def test_server_crash_during_a_backend_run_is_a_finding_of_chapter_03(embedded_model, tmp_path):
    from servebook.backends import force_each_backend
    from servebook.engines import get_engine

    store = RunStore.at(tmp_path / "run")
    eng = get_engine("transformers")
    registry = store.path / "servers.jsonl"
    ready = threading.Event()

    def progress(msg: str) -> None:
        if msg.startswith("ready after"):
            ready.set()

    def kill_the_first_server_once_ready():
        if ready.wait(240):
            started = [e for e in _events(registry) if e["event"] == "started"]
            os.killpg(started[0]["pgid"], signal.SIGKILL)  # while its probe requests run

    killer = threading.Thread(target=kill_the_first_server_once_ready, daemon=True)
    killer.start()
    # one server at a time (as on a GPU): the first is killed once ready, during its own requests; the sweep with its
    # servers started together (a CPU host) has its own crash drill in tests/test_backends_overlap.py
    rows = force_each_backend(eng, embedded_model, [None, "eager"], store, max_tokens=8, runs=2, ready_timeout=240,
                              progress=progress, overlap_starts=False)
    killer.join(5)
    assert [r["attention"] for r in rows] == ["auto", "eager"]
    crashed, after = rows
    assert crashed["outcome"] == "crashed", (crashed["outcome"], crashed.get("error"), crashed.get("log_tail"))
    assert crashed["error"] and crashed["port_free_after"] is True
    assert after["outcome"] == "ok"  # the sweep moved on
    assert [r["outcome"] for r in store.rows("backends")] == ["crashed", "ok"]
    assert not leftover_servers(registry)


@pytest.mark.timeout(300)
def test_a_start_whose_tokens_all_came_in_one_read_is_no_rate_not_ok(embedded_model, tmp_path, monkeypatch):
    """CI (2 loaded cores): transformers serve sent all 8 tokens of the default's one timed request in one write, so the
    client had no time between the first token and the last; the row said ``ok`` with ``decode_tok_s`` None. Provoked
    here: every read of the default's rate requests stamped at its last read, as when they all come in one."""
    from servebook import bench
    from servebook.backends import force_each_backend
    from servebook.backends.serve import NO_RATE
    from servebook.engines import get_engine
    from servebook.measured import nothing_measured

    real_stream, real_finish = bench.single_stream, bench.client.finish
    in_one_read = threading.Event()

    def single_stream(*a, **kw):
        (in_one_read.set if kw.get("attention") == "auto" else in_one_read.clear)()
        try:
            return real_stream(*a, **kw)
        finally:
            in_one_read.clear()

    def finish(raw, *a, **kw):
        if in_one_read.is_set() and raw.stamps:
            raw.stamps = [raw.stamps[-1]] * len(raw.stamps)
        return real_finish(raw, *a, **kw)

    monkeypatch.setattr(bench, "single_stream", single_stream)
    monkeypatch.setattr(bench.client, "finish", finish)
    store = RunStore.at(tmp_path / "run")
    rows = force_each_backend(get_engine("transformers"), embedded_model, [None, "eager"], store, max_tokens=8, runs=2,
                              ready_timeout=240, progress=None, preflight=False, overlap_starts=False, starts=2)
    auto, eager = rows
    assert auto["outcome"] == NO_RATE and auto["decode_tok_s"] is None, (auto["outcome"], auto.get("error"))
    assert auto["error"].startswith("its output passed every check; no decode rate: 2 of 2 served requests untimed (all 16 "
                                    "tokens arrived in one network read"), auto["error"]
    assert "starts" not in auto and auto["port_free_after"] is True  # not started again: a start with no rate
    # its outputs stay the reference: eager is compared with them, measured, and started twice
    assert eager["outcome"] == "ok" and eager["decode_tok_s"] > 0 and eager.get("agreement") is not None, eager.get("error")
    assert [s["start"] for s in eager["starts"]] == [0, 1]
    assert nothing_measured(store, "03") is None
    alone = RunStore.at(tmp_path / "alone")
    alone.append("backends", auto)
    assert nothing_measured(alone, "03") == f"nothing measured: no backend produced a decode rate; first cause: transformers auto: {auto['error']}"
    assert not leftover_servers(store.path / "servers.jsonl")


# ---------------------------------------------------------------------------------------------
# servers that cannot start: each a clear recorded error
# ---------------------------------------------------------------------------------------------
def _force_with_launch(embedded_model, store, launch: Launch, ready_timeout: float = 240):
    from servebook.backends import force_each_backend
    from servebook.engines import get_engine

    eng = get_engine("transformers")
    eng.launch = lambda *a, **k: launch  # the engine "starts" this command
    return force_each_backend(eng, embedded_model, [None], store, max_tokens=4, runs=1, ready_timeout=ready_timeout,
                              progress=None)[0]


@pytest.mark.timeout(60)
def test_server_that_never_listens_is_stopped_and_recorded(embedded_model, tmp_path):
    marker = f"drill-hang-{os.getpid()}"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)  # {marker}']); time.sleep(600)"
    store = RunStore.at(tmp_path / "run")
    row = _force_with_launch(embedded_model, store, Launch(cmd=[sys.executable, "-c", code], port=free_port(), engine="fake"),
                             ready_timeout=3)
    assert row["outcome"] == "failed to start"
    assert "did not answer" in row["error"] and "within 3s" in row["error"] and "it was stopped" in row["error"]
    assert store.rows("backends")[0]["error"] == row["error"]
    assert _wait(lambda: not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])], 15)


@pytest.mark.timeout(60)
def test_port_taken_by_another_program_is_recorded(embedded_model, tmp_path):
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    port = other.getsockname()[1]
    try:
        store = RunStore.at(tmp_path / "run")
        row = _force_with_launch(embedded_model, store, Launch(cmd=[sys.executable, "-c", "pass"], port=port, engine="fake"))
        assert row["outcome"] == "failed to start"
        assert f"port {port}" in row["error"] and "already in use" in row["error"]
        assert port_listening(port)  # the other program was left alone
    finally:
        other.close()


@pytest.mark.timeout(180)
def test_wrong_model_path_is_a_clear_error(embedded_model, tmp_path, capsys):
    from servebook.cli import main
    from servebook.engines import get_engine

    # before anything runs: the book refuses the parameter in one line
    assert main(["book", "--model", str(tmp_path / "no-such-model"), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parameter 'model'" in err and "no such directory" in err
    assert not (tmp_path / "runs").exists()
    # a directory that exists but holds no usable model: the server's own reason is in the recorded error
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    store = RunStore.at(tmp_path / "run")
    row = _force_with_launch(embedded_model, store, get_engine("transformers").launch(str(broken)))
    assert row["outcome"] == "failed to start"
    # the engine's own last error line is the finding; servebook's account of the exit is kept beside it
    assert "exited with code" in row["server_error"] and "see its log" in row["server_error"]
    assert row["error"] != row["server_error"] and row["error"].strip()
    assert row["log_tail"].strip()
    assert not leftover_servers(store.path / "servers.jsonl")


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_gpu_out_of_memory_at_start_is_a_clear_recorded_error(embedded_model, tmp_path):
    """Runs only with CUDA: the GPU is filled by this test, then the server is started on it."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from servebook.engines import get_engine

    free, _total = torch.cuda.mem_get_info(0)
    hog = []
    try:
        left = free
        while left > 64 * 2**20:  # leave less than the server needs for its CUDA context and weights
            chunk = max(min(left - 32 * 2**20, 8 * 2**30), 16 * 2**20)
            try:
                hog.append(torch.empty(chunk, dtype=torch.uint8, device="cuda:0"))
            except torch.cuda.OutOfMemoryError:
                break
            left = torch.cuda.mem_get_info(0)[0]
        store = RunStore.at(tmp_path / "run")
        launch = get_engine("transformers").launch(str(embedded_model))
        launch.env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        auto = _force_with_launch(embedded_model, store, launch)  # device 'auto': transformers places it where it fits
        launch.cmd[launch.cmd.index("--device") + 1] = "cuda"     # the GPU or nothing
        launch.port = free_port()
        launch.cmd[launch.cmd.index("--port") + 1] = str(launch.port)
        store_cuda = RunStore.at(tmp_path / "run-cuda")  # another run: the sweep would skip a label it already measured
        row = _force_with_launch(embedded_model, store_cuda, launch)
    finally:
        del hog
        torch.cuda.empty_cache()
    # On the H200 (2026-11-29) device 'auto' loaded the model on the CPU and served: a silent fallback, which the
    # sweep must not call ok.
    assert auto["outcome"] != "ok" or auto.get("reported_device", "").startswith("cuda"), auto
    assert row["outcome"] in ("failed to start", "crashed", "rejected", "failed"), row
    assert "out of memory" in row["error"].lower(), row  # said in the recorded error, not only in the log
    assert not leftover_servers(store.path / "servers.jsonl") and not leftover_servers(store_cuda.path / "servers.jsonl")


# ---------------------------------------------------------------------------------------------
# disk full while writing results
# ---------------------------------------------------------------------------------------------
_FILL = textwrap.dedent("""
    import json, resource, sys
    from servebook.errors import ResultsError
    from servebook.results import RunStore
    run_dir, limit = sys.argv[1], int(sys.argv[2])
    store = RunStore.at(run_dir)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    n = 0
    try:
        while True:
            store.append("m", {"i": n, "pad": "x" * 300})
            n += 1
    except ResultsError as exc:
        print(json.dumps({"n": n, "error": str(exc)}))
""")


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode == 0


@pytest.mark.timeout(60)
def test_disk_full_while_writing_results(tmp_path):
    mnt = tmp_path / "small-disk"
    mounted = _mount_tmpfs(mnt, "128k")
    try:
        run_dir = mnt / "run"
        res = subprocess.run([sys.executable, "-c", _FILL, str(run_dir), "0" if mounted else str(48 * 1024)],
                             capture_output=True, text=True, env=_env(), timeout=60)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        out = json.loads(res.stdout)
        assert out["n"] > 10
        # the error names the file, says why and what to do
        assert str(run_dir / "m.jsonl") in out["error"]
        assert ("disk holding it is full" if mounted else "file size limit") in out["error"]
        assert "results written before are intact" in out["error"] and "resume with the same --run-id" in out["error"]
        # every row written before is whole; none torn mid-line
        rows = _jsonl_lines_whole(run_dir / "m.jsonl")
        assert [r["i"] for r in rows] == list(range(out["n"]))
        if mounted:  # space comes back: the run goes on, the table stays clean
            subprocess.run(["mount", "-o", "remount,size=1m", str(mnt)], check=True)
            RunStore.at(run_dir).append("m", {"i": out["n"], "pad": ""})
            assert [r["i"] for r in _jsonl_lines_whole(run_dir / "m.jsonl")] == list(range(out["n"] + 1))
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.timeout(120)
def test_disk_full_for_the_book_is_a_one_line_error(tmp_path):
    mnt = tmp_path / "full-disk"
    if not _mount_tmpfs(mnt, "64k"):
        pytest.skip("needs root and tmpfs to fill a disk")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)  # the disk is full before the book starts
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        runs = subprocess.run(SERVEBOOK + ["book", "--smoke", "--only", "02", "--runs", str(mnt / "runs"), "--out", str(tmp_path / "site")],
                              capture_output=True, text=True, env=_env(), timeout=100)
        assert runs.returncode == 2 and "Traceback" not in runs.stderr, runs.stderr[-2000:]
        assert runs.stderr.strip().count("\n") == 0 and "full" in runs.stderr and str(mnt) in runs.stderr
        # rendering a finished run onto the full disk: the same
        run = RunStore.at(tmp_path / "a-run")
        run.write_manifest({"chapters": []})
        import nbformat  # one executed chapter: a run with none is refused before its --out is written (test_inputs.py)

        (run.path / "notebooks").mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 06. Findings")]),
                       run.path / "notebooks" / "06_findings.ipynb")
        html = subprocess.run(SERVEBOOK + ["html", str(run.path), "--out", str(mnt / "site")],
                              capture_output=True, text=True, env=_env(), timeout=100)
        assert html.returncode == 2 and "Traceback" not in html.stderr, html.stderr[-2000:]
        assert html.stderr.strip().count("\n") == 0 and str(mnt) in html.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# ---------------------------------------------------------------------------------------------
# bad parameters: any input is accepted or a one-line error naming the parameter
# ---------------------------------------------------------------------------------------------
class _Reached(Exception):
    """Validation passed; the real work would start here."""


_junk = st.text(alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=24) | \
    st.sampled_from(["", "-1", "0", "1", "2.5", "1e9", "local", "embedded", "transformers", "sglang==0.5.9", "vllm==",
                     "rtx-pro-6000", "h200", "12.0", "x.y", "ssh://u@h", "01", "07", "01,05", "nan", "-", "--", "a=b",
                     "http://127.0.0.1:1", "http://[::1", "ftp://x", "http://h:99999", "1,2,x", "0,1"])

_BOOK = {"--engine": "engine", "--host": "host", "--model": "model", "--profile": "profile", "--run-id": "run_id",
         "--only": "only", "--cell-timeout": "cell_timeout", "-p": None}
_PROBE = {"--host": "host", "--profile": "profile", "--engine": "engine", "--gpus": "gpus"}
_WHATIF = {"--engine": "engine", "--gpu": "gpu", "--capability": "capability", "--model": "model", "--cuda": "cuda"}
_BENCH = {"--url": "url", "--concurrency": "concurrency", "--input-len": "input", "--output-len": "output",
          "--runs": "runs", "--warmup": "warmup", "--requests-per-level": "requests", "--api": "api"}
_CHAPTER_PARAMS = ["max_tokens", "runs", "backends", "input_len", "api", "seed_tp", "seed_allreduce_us", "smoke", "nosuch"]


@pytest.fixture
def cli_sandbox(tmp_path, monkeypatch):
    """The CLI with its validation real and the work behind it replaced by `_Reached`."""
    import functools
    import importlib

    import servebook.bench
    import servebook.book
    import servebook.probe

    whatif_module = importlib.import_module("servebook.selection.whatif")

    def reached(*_a, **_k):
        raise _Reached()

    monkeypatch.setattr(servebook.book, "notebook_parameters", functools.lru_cache(None)(servebook.book.notebook_parameters))
    for module, name in [(servebook.book.RunStore, "open"), (servebook.probe.collect, "_ask_engines"), (servebook.probe.collect, "detect_versions"),
                         (whatif_module, "_run"), (servebook.bench.cli, "check_server")]:
        monkeypatch.setattr(module, name, reached)
    return tmp_path


def _one_line_error_or_accepted(argv: list[str], names: list[str], capsys) -> str:
    from servebook.cli import main

    try:
        rc = main(argv)
    except _Reached:
        capsys.readouterr()
        return "accepted"
    except SystemExit as exc:  # argparse: usage errors
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2, (argv, rc, err)
    assert err and "\n" not in err and "Traceback" not in err, (argv, err)
    assert any(n in err for n in names), (argv, err)
    return "rejected"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(sorted(_BOOK)), value=_junk, pname=st.sampled_from(_CHAPTER_PARAMS))
def test_book_arguments_fuzzed(cli_sandbox, capsys, flag, value, pname):
    argv = ["book", "--smoke", "--runs", str(cli_sandbox / "runs"), "--out", str(cli_sandbox / "site")]
    if flag == "-p":
        argv += ["--only", "05", "-p", f"{pname}={value}"]
        names = [pname, "-p"]
    else:
        argv += ([] if flag == "--only" else ["--only", "05"]) + [flag, value]
        names = [_BOOK[flag], flag]
    outcome = _one_line_error_or_accepted(argv, names, capsys)
    if flag == "--cell-timeout" and outcome == "accepted":
        assert int(value) >= 1
    if flag == "-p" and pname in ("max_tokens", "runs", "input_len", "seed_tp") and outcome == "accepted":
        int(value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(sorted(_PROBE)), value=_junk)
def test_probe_arguments_fuzzed(cli_sandbox, capsys, flag, value):
    outcome = _one_line_error_or_accepted(["probe", flag, value], [_PROBE[flag], flag], capsys)
    if flag == "--gpus" and outcome == "accepted":
        assert int(value) >= 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(sorted(_WHATIF)), value=_junk)
def test_whatif_arguments_fuzzed(cli_sandbox, capsys, flag, value):
    outcome = _one_line_error_or_accepted(["whatif", flag, value], [_WHATIF[flag], flag], capsys)
    if outcome == "accepted" and flag in ("--cuda", "--capability") and value:
        assert value[0].isdigit() and "." in value


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(sorted(_BENCH)), value=_junk)
def test_bench_arguments_fuzzed(cli_sandbox, capsys, flag, value):
    argv = ["bench", "--url", "http://127.0.0.1:9", "--tokenizer", "/nonexistent", flag, value]
    outcome = _one_line_error_or_accepted(argv, [_BENCH[flag], flag], capsys)
    if outcome == "accepted" and flag in ("--runs", "--input-len", "--output-len", "--requests-per-level"):
        assert int(value) >= 1
    if outcome == "accepted" and flag == "--url":
        assert value.startswith(("http://", "https://"))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["engine", "host", "model", "profile", "smoke", "colour"]), value=_junk | st.integers() | st.floats() | st.none())
@example(name="model", value="~0")  # a ~user with no home here once raised RuntimeError from pathlib
def test_notebook_parameters_fuzzed(name, value):
    from servebook.params import coerce, validate

    try:
        validate({name: value})
    except ParameterError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"parameter '{name}'")
    for typ in (int, float, bool, str):
        try:
            coerce(name, value, typ)
        except ParameterError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"parameter '{name}'")


@pytest.mark.timeout(120)
def test_bad_parameters_as_a_subprocess_print_one_line(tmp_path):
    """The installed entry point (not only main()): no traceback reaches the terminal."""
    for argv, needle in [
        (["book", "--engine", "tgi"], "parameter 'engine'"),
        (["book", "--cell-timeout", "soon"], "--cell-timeout"),
        (["book", "-p", "max_tokens=many", "--only", "05"], "parameter 'max_tokens'"),
        (["bench", "--url", "127.0.0.1:8000"], "parameter 'url'"),
        (["whatif", "--gpu", "no-such-gpu"], "no-such-gpu"),
    ]:
        res = subprocess.run(SERVEBOOK + argv + (["--runs", str(tmp_path / "r"), "--out", str(tmp_path / "s")] if argv[0] == "book" else []),
                             capture_output=True, text=True, env=_env(), timeout=100)
        err = res.stderr.strip()
        assert res.returncode == 2 and "Traceback" not in err and err.count("\n") == 0 and needle in err, (argv, err)


@pytest.mark.drills
def test_a_token_an_engine_prints_is_masked_in_its_log(tmp_path):
    """An engine that prints its environment (some do at start) must not put a token into the run directory."""
    from servebook.processes import free_port
    from servebook.servers import Launch, Server

    port = free_port()
    code = ("import http.server, os, sys; print('env HF_TOKEN=' + os.environ['HF_TOKEN'], 'key', os.environ['MY_API_KEY'], flush=True); "
            f"http.server.ThreadingHTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()")
    launch = Launch(cmd=[sys.executable, "-c", code], port=port, ready_path="/", engine="printer",
                    env={"HF_TOKEN": "hf_drillTOKEN12345", "MY_API_KEY": "plainvalue-9876"})
    log = tmp_path / "logs" / "printer.log"
    with Server.start(launch, log, ready_timeout=30, progress=None):
        pass
    text = log.read_text()
    assert "hf_drillTOKEN12345" not in text and "plainvalue-9876" not in text and "***" in text


# ---------------------------------------------------------------------------------------------
# secrets an engine prints (api_key='..', {'api_key': [..]}, JSON, --api-key, HF_TOKEN=, Bearer, password=, URL
# passwords): masked as the log is written, so the run directory never holds them: while the server runs, after it
# stopped, and after the process that started it was killed with SIGKILL (tests/harness/leaky_engine.py prints them)
# ---------------------------------------------------------------------------------------------
def _leaky():
    import importlib.util

    spec = importlib.util.spec_from_file_location("leaky_engine", ROOT / "tests" / "harness" / "leaky_engine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LEAKY = _leaky()
LEAKY_PATH = str(ROOT / "tests" / "harness" / "leaky_engine.py")


def _leaky_launch(port: int) -> Launch:
    return Launch(cmd=[sys.executable, LEAKY_PATH, str(port), *LEAKY.LAUNCH_ARGS], port=port, ready_path="/",
                  engine="leaky", env=dict(LEAKY.LAUNCH_ENV))


def _raw_secrets_in(root: Path) -> list[tuple[str, str]]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", errors="replace")
            found += [(str(path.relative_to(root)), form) for form, raw in LEAKY.SECRETS.items() if raw in text]
            found += [(str(path.relative_to(root)), form) for form, halves in LEAKY.SPLIT.items() if any(h in text for h in halves)]
    return found


@pytest.mark.timeout(120)
def test_secrets_an_engine_prints_are_masked_while_it_runs_and_after_it_stops(tmp_path):
    from servebook.servers import Server

    store = RunStore.at(tmp_path / "run")
    launch = _leaky_launch(free_port())
    log = store.path / "logs" / "leaky.log"
    with Server.start(launch, log, ready_timeout=30, registry=store.path / "servers.jsonl", progress=None) as srv:
        assert _wait(lambda: "READY-MARKER" in log.read_text(), 15), log.read_text()
        LEAKY.check(log.read_text(), final=False)  # (a) the server runs: its log is already masked
        assert srv.alive() and not _raw_secrets_in(store.path)
        store.append("backends", {"engine": "leaky", "launch": launch.shell(), "argv": launch.cmd, "env": launch.env})
    LEAKY.check(log.read_text(), final=True)  # (b) stopped: its last words (a secret at exit) masked too
    assert not _raw_secrets_in(store.path)
    row = store.rows("backends")[0]
    assert "--api-key '***'" in row["launch"] and row["argv"][row["argv"].index("--api-key") + 1] == "***"
    assert row["env"] == {k: "***" for k in LEAKY.LAUNCH_ENV}
    assert all("--api-key '***'" in e["cmd"] for e in _events(store.path / "servers.jsonl"))


@pytest.mark.timeout(120)
def test_secrets_an_engine_prints_are_masked_when_its_parent_is_killed(tmp_path):
    """SIGKILL of the process that started the server: the copier outlives it, writes the server's last output
    (masked) once the reaper stopped the server, and ends; nothing is left running."""
    run = tmp_path / "run"
    log = run / "logs" / "leaky.log"
    port = free_port()
    driver = textwrap.dedent(f"""
        import sys, time
        from servebook.servers import Launch, Server
        launch = Launch(cmd={[sys.executable, LEAKY_PATH, str(port), *LEAKY.LAUNCH_ARGS]!r}, port={port}, ready_path="/",
                        engine="leaky", env={dict(LEAKY.LAUNCH_ENV)!r})
        srv = Server.start(launch, {str(log)!r}, ready_timeout=30, registry={str(run / 'servers.jsonl')!r}, progress=None)
        print(srv.pgid, srv._copier.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True, env=_env(), start_new_session=True)
    pgid = copier = None
    try:
        pgid, copier = (int(x) for x in proc.stdout.readline().split())
        assert _wait(lambda: "READY-MARKER" in log.read_text(), 15), log.read_text()
        LEAKY.check(log.read_text(), final=False)  # (a) while it runs
        proc.kill()  # (c) SIGKILL of the parent
        proc.wait(timeout=10)
        assert _wait(lambda: not _alive(pgid) and not _alive(copier), 30), (_cmd(pgid), _cmd(copier))
        LEAKY.check(log.read_text(), final=True)  # the reaper's SIGTERM made the server speak once more: masked
        assert not _raw_secrets_in(run)
        assert not port_listening(port)
    finally:  # nothing of this drill may outlive it
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if pgid and _alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
        if copier and _alive(copier):
            os.kill(copier, signal.SIGKILL)
