"""Hosts: a real OpenSSH server on 127.0.0.1 (throwaway keys), recording and replay of real runs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from servebook.errors import ParameterError
from servebook.executions import STAMPS
from servebook.hosts import CASSETTE, HostError, LocalHost, RecordingHost, ReplayHost, get_host, start_recording
from servebook.params import validate

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
needs_sshd = pytest.mark.skipif(not os.path.exists(SSHD), reason="needs OpenSSH's sshd (apt-get install -y openssh-server; .ci/run does)")
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """sshd -D on 127.0.0.1:<free port> with a throwaway host key and user key; yields paths and an ssh_config writer."""
    d = tmp_path_factory.mktemp("sshd")
    host_pub = _keygen(d / "host_key")
    _keygen(d / "user_key")
    _keygen(d / "stranger_key")
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"PermitRootLogin prohibit-password\nPidFile {d / 'sshd.pid'}\nLogLevel VERBOSE\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sshd.log", "wb"), start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None, (d / "sshd.log").read_text()
        time.sleep(0.1)
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    (d / "empty_known_hosts").write_text("")
    user = os.environ.get("USER") or __import__("getpass").getuser()

    def config(name="known_hosts", key="user_key", port_=port) -> str:
        path = d / f"ssh_config-{name}-{key}-{port_}"
        path.write_text(f"Host sbtest\n  HostName 127.0.0.1\n  Port {port_}\n  User {user}\n  IdentityFile {d / key}\n"
                        f"  IdentitiesOnly yes\n  UserKnownHostsFile {d / name}\n")
        return str(path)

    yield {"dir": d, "port": port, "pid": proc.pid, "config": config}
    os.killpg(proc.pid, 15)
    proc.wait(timeout=10)


@pytest.fixture
def ssh_env(sshd, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_SSH_CONFIG", sshd["config"]())
    monkeypatch.setenv("SERVEBOOK_SSH_TIMEOUT", "5")
    return sshd


# -- parameters -----------------------------------------------------------------------------------

def test_host_parameter_forms(tmp_path):
    assert validate({"host": "ssh://me@gpu-box:2222"})["host"] == "ssh://me@gpu-box:2222"
    assert validate({"host": "ssh://gpu-box?python=/opt/venv/bin/python"})["host"].startswith("ssh://")
    for bad, needle in [("gpu-box", "valid hosts"), ("ssh://me:secret@box", "passwords are not accepted"),
                        ("ssh://box:port", "port must be a number"), ("ssh://box/x", "no path"),
                        (f"replay:{tmp_path}", "no cassette.jsonl")]:
        with pytest.raises(ParameterError) as info:
            validate({"host": bad})
        assert needle in str(info.value) and "secret" not in str(info.value)


# -- recording and replay, no host needed ---------------------------------------------------------

def test_recording_masks_secrets_and_replay_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnop")
    rec = RecordingHost(LocalHost(), tmp_path)
    out = rec.run(["sh", "-c", "echo token=$HF_TOKEN; echo done"], timeout=10)
    assert "hf_abcdefghijklmnop" in out.stdout  # the caller sees the real output
    port = rec.free_port()
    text = (tmp_path / CASSETTE).read_text()
    assert "hf_abcdefghijklmnop" not in text and "***" in text
    rep = ReplayHost(tmp_path)
    again = rep.run(["sh", "-c", "echo token=$HF_TOKEN; echo done"])
    assert again.rc == 0 and "done" in again.stdout and "hf_" not in again.stdout
    assert rep.free_port() == port
    with pytest.raises(HostError) as info:
        rep.free_port()
    assert "no run 'free_port'" in str(info.value) and "asked 2 times, recorded 1" in str(info.value)
    with pytest.raises(HostError) as info:
        rep.run(["nvidia-smi", "-L"])
    assert "'nvidia-smi -L'" in str(info.value) and "never recorded" in str(info.value)


def test_spawned_process_group_is_stopped_when_its_owner_dies(tmp_path):
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from servebook.hosts import LocalHost\n"
            "p = LocalHost().spawn(['sh', '-c', 'sleep 300 & sleep 300'], log_path=%r)\n"
            "print(p.pgid, flush=True); time.sleep(300)\n") % (str(ROOT / "lib"), str(tmp_path / "log"))
    owner = subprocess.Popen([os.sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    pgid = int(owner.stdout.readline())
    os.killpg(pgid, 0)  # running
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail("the watchdog did not stop the process group when its owner died")


# -- SSH against a real sshd ------------------------------------------------------------------------

@needs_sshd
def test_ssh_runs_commands_python_and_processes(ssh_env):
    with _ssh("ssh://sbtest") as h:
        assert h.run(["echo", "hi"]).stdout == "hi\n"
        assert h.run(["no-such-command-here"]).rc == 127
        t0 = time.monotonic()
        assert h.run(["sleep", "30"], timeout=2).rc == 124 and time.monotonic() - t0 < 15
        assert h.python("import sys; print(sys.version_info[0])").stdout.strip() == "3"
        assert h.call("servebook.secrets:mask_env", {"env": {"HF_TOKEN": "x", "A": "b"}}) == {"HF_TOKEN": "***", "A": "b"}
        port = h.free_port()
        p = h.spawn([os.sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], log_path=str(ssh_env["dir"] / "spawn.log"))
        assert p.alive()
        h.python(f"import socket, time\nfor _ in range(100):\n    try:\n        socket.create_connection(('127.0.0.1', {port})).close(); break\n"
                 "    except OSError:\n        time.sleep(0.1)", timeout=30)
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{h.forward(port)}/", timeout=10) as resp:  # through the tunnel
            assert resp.status == 200
        p.stop(grace_s=2)
        assert not p.alive()
        assert "GET / HTTP" in p.log_text()


@needs_sshd
def test_transformers_attention_list_is_read_on_the_ssh_host(ssh_env, tmp_path):
    """The script that reads transformers' accepted implementations is a file that travels to the host."""
    from servebook.engines import get_engine
    from servebook.hosts._ssh import SSHHost

    with RecordingHost(SSHHost(f"ssh://sbtest?python={os.sys.executable}"), tmp_path) as h:
        there = get_engine("transformers", python=os.sys.executable)
        there.host = h
        assert there.attention_choices() == get_engine("transformers").attention_choices()
    keys = [json.loads(ln).get("key", "") for ln in (tmp_path / CASSETTE).read_text().splitlines()[1:]]
    assert "ship transformers_attention.py" in keys


def _ssh(spec):
    from servebook.hosts._ssh import SSHHost

    return SSHHost(spec)


@needs_sshd
def test_ssh_unknown_host_key_is_refused_with_how_to_trust_it(sshd, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_SSH_CONFIG", sshd["config"]("empty_known_hosts"))
    with pytest.raises(HostError) as info:
        _ssh("ssh://sbtest")
    assert "not in your known_hosts" in str(info.value) and "ssh-keyscan" in str(info.value)


@needs_sshd
def test_ssh_failed_authentication(sshd, monkeypatch):
    monkeypatch.setenv("SERVEBOOK_SSH_CONFIG", sshd["config"](key="stranger_key"))
    with pytest.raises(HostError) as info:
        _ssh("ssh://sbtest")
    assert "authentication failed" in str(info.value) and "ssh-add" in str(info.value)


@needs_sshd
def test_ssh_unreachable_port_fails_within_the_timeout(sshd, monkeypatch):
    # a port that accepts TCP but never speaks SSH: only the connect timeout ends the wait
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)
        monkeypatch.setenv("SERVEBOOK_SSH_CONFIG", sshd["config"](port_=silent.getsockname()[1]))
        monkeypatch.setenv("SERVEBOOK_SSH_TIMEOUT", "3")
        t0 = time.monotonic()
        with pytest.raises(HostError) as info:
            _ssh("ssh://sbtest")
        assert time.monotonic() - t0 < 15
    assert "within 3 s" in str(info.value)
    monkeypatch.setenv("SERVEBOOK_SSH_CONFIG", sshd["config"](port_=_free_port()))  # nothing listens: refused at once
    with pytest.raises(HostError) as info:
        _ssh("ssh://sbtest")
    assert "cannot connect" in str(info.value) or "cannot reach" in str(info.value)


@needs_sshd
def test_ssh_connection_dropped_mid_command_stops_what_was_started(ssh_env):
    import psutil

    h = _ssh("ssh://sbtest")
    p = h.spawn(["sh", "-c", "sleep 300 & sleep 300"], log_path=str(ssh_env["dir"] / "dropped.log"))
    os.killpg(p.pgid, 0)  # the same machine: we can see it
    box = {}

    def long():
        t0 = time.monotonic()
        try:
            box["res"] = h.run(["sleep", "60"], timeout=120)
        except HostError as exc:
            box["err"] = exc
        box["s"] = time.monotonic() - t0

    th = threading.Thread(target=long)
    th.start()
    time.sleep(1.5)
    sessions = psutil.Process(ssh_env["pid"]).children(recursive=True)
    assert sessions, "no sshd session process to drop"
    for s in sessions:  # the server side of our connection goes away, as when a network drops
        try:
            if s.name().startswith("sshd"):
                s.kill()
        except psutil.NoSuchProcess:  # a short-lived child of sshd ended between the listing and this look
            continue
    th.join(60)
    assert "err" in box and "dropped" in str(box["err"]) and box["s"] < 30, box
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(p.pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the process group started over the dropped connection is still running")
    h.close()


# -- the book over SSH, and record/replay of a real run ----------------------------------------------

def _run_book(tmp_path, host, only, run_id, record=False, **extra):
    """A smoke book of ``only``. The tests that run chapter 05 take ``no_engine_envs``, so that it runs as on CI whatever
    engine environments this machine has cached (its client ceiling would add sglang.bench_serving where SGLang 0.5.9 is
    cached). Chapters 03 and 04 ask none; their test keeps the real cache, since a book over SSH finds the embedded model
    in the host's cache and its replay here would find it under another path."""
    from servebook.book import run_book

    return run_book({"host": host, "smoke": True}, out=tmp_path / f"book-{run_id}", runs_root=tmp_path / "runs",
                    run_id=run_id, only=only, extra=extra, progress=None, record=record)


# Chapter 05 over SSH, sized to what crosses the connection: one server start (the second start of a smoke run adds no
# SSH path; test_book_chapters_03_and_04_over_ssh starts and stops two servers on the host), and no profile (transformers
# is profiled in the kernel's own process, never on the host: tests/test_profile.py and the smoke book of tests/test_book.py
# cover it).
_CH05_OVER_SSH = {"max_concurrency": 2, "starts": 1, "profile_steps": 0}


@needs_sshd
@pytest.mark.slow
def test_book_chapters_01_and_05_over_ssh(ssh_env, tmp_path, no_engine_envs):
    from servebook.results import RunStore

    spec = f"ssh://sbtest?python={os.sys.executable}"  # the host's interpreter with transformers (the engine)
    res = _run_book(tmp_path, spec, ["01", "05"], "ssh1", record=True, **_CH05_OVER_SSH)
    store = RunStore.at(res.run_dir)
    assert [c["status"] for c in res.chapters] == ["ok", "ok"], res.chapters
    probe = json.loads((store.path / "probe.json").read_text())
    assert probe["host"] == spec and probe["versions"]["python_executable"] == os.sys.executable
    single = store.table("bench_summary")
    single = single[single["phase"] == "single"]
    # one single-stream row per server start (chapter 05 measures over starts), each with a rate
    assert len(single) >= 1 and (single["decode_tok_s_mean"] > 0).all(), store.table("failures")
    assert "start" not in single or single["start"].nunique() == len(single)
    req = store.table("bench_requests")
    assert req["ok"].all() and (req["output_tokens"] > 0).all()
    rows = [json.loads(ln) for ln in (store.path / "servers.jsonl").read_text().splitlines()]
    assert {r["event"] for r in rows} == {"started", "stopped"} and all(r["host"] == spec for r in rows)
    for r in rows:  # stopped on the host
        with pytest.raises(ProcessLookupError):
            os.killpg(r["pgid"], 0)
    assert (store.path / "server-transformers.log").stat().st_size > 0  # fetched from the host
    # the recording of this SSH run replays chapter 05 here, request for request
    rep = RunStore.at(_run_book(tmp_path, f"replay:{res.run_dir}", ["05"], "ssh1-replay", **_CH05_OVER_SSH).run_dir)
    mine, theirs = rep.rows("bench_requests"), store.rows("bench_requests")
    drop = lambda r: {k: v for k, v in r.items() if k not in STAMPS}  # noqa: E731  (when and by which execution)
    assert len(mine) == len(theirs) and [drop(r) for r in mine] == [drop(r) for r in theirs]


@pytest.mark.slow
def test_record_a_cpu_run_of_chapter_01_and_replay_it(tmp_path, no_engine_envs):
    rec = _run_book(tmp_path, "local", ["01"], "rec", record=True)
    assert rec.chapters[0]["status"] == "ok"
    assert (Path(rec.run_dir) / CASSETTE).exists()
    rep = _run_book(tmp_path, f"replay:{rec.run_dir}", ["01"], "rep")
    assert rep.chapters[0]["status"] == "ok"
    a, b = (json.loads((Path(r.run_dir) / "probe.json").read_text()) for r in (rec, rep))
    assert a == b  # the same report, rebuilt without touching the host
    assert (tmp_path / "book-rep" / "01_detect_capabilities.html").exists()
    # a chapter that was not recorded: its failures name the missing interaction, the book does not crash
    miss = _run_book(tmp_path, f"replay:{rec.run_dir}", ["05"], "miss", max_concurrency=1)
    from servebook.results import RunStore

    fails = RunStore.at(miss.run_dir).table("failures")
    assert fails["error"].str.contains("the cassette has no").any(), fails


def _recorded_runs() -> list[Path]:
    """Every recorded run with a cassette (data/runs/*, and SERVEBOOK_REPLAY_DIR when set)."""
    dirs = sorted(p.parent for p in (ROOT / "data" / "runs").glob(f"*/{CASSETTE}"))
    if os.environ.get("SERVEBOOK_REPLAY_DIR"):
        dirs.append(Path(os.environ["SERVEBOOK_REPLAY_DIR"]))
    return dirs


@pytest.mark.slow
@pytest.mark.parametrize("run_dir", _recorded_runs(), ids=lambda p: p.name)
def test_replay_a_recorded_run(run_dir, tmp_path, no_engine_envs):
    """Rebuild a recorded run's chapters from its cassette, here, with no GPU and no host."""
    from servebook.results import RunStore

    recorded = RunStore.at(run_dir)
    manifest = recorded.manifest
    # the chapters that run through the host (the others run where the book runs, not from the cassette)
    chapters = [c["chapter"][:2] for c in recorded.rows("chapters") if c.get("status") == "ok" and c["chapter"][:2] in ("01", "05")]
    if not chapters:
        pytest.skip(f"{run_dir} recorded neither chapter 01 nor 05")
    params = manifest.get("parameters", {})
    from servebook.book import chapters as book_chapters, notebook_parameters

    declared = {n for c in book_chapters() if c.number in chapters for n in notebook_parameters(c.source)}
    extra = {k: v for k, v in params.items() if k in declared and k not in ("host", "engine", "model", "profile", "smoke", "run_dir")}
    from servebook.book import run_book

    res = run_book({"host": f"replay:{run_dir}", "engine": params.get("engine", "transformers"), "smoke": params.get("smoke", False),
                    "model": params.get("model", "embedded"),  # 'embedded' or a card: a model directory of the GPU host is not here
                    "profile": params.get("profile", "")}, out=tmp_path / "book", runs_root=tmp_path / "runs", run_id="replay",
                   only=sorted(set(chapters)), extra=extra, progress=None)
    assert all(c["status"] == "ok" for c in res.chapters), res.chapters
    again = RunStore.at(res.run_dir)
    if (Path(run_dir) / "probe.json").exists():
        a = json.loads((Path(run_dir) / "probe.json").read_text())
        b = json.loads((again.path / "probe.json").read_text())
        assert a["gpus"] == b["gpus"] and a["engines"] == b["engines"]
        page = (tmp_path / "book" / "01_detect_capabilities.html").read_text()
        for g in a["gpus"]:  # the rendered chapter states the recorded host's facts, not this machine's
            assert g["name"] in page, g["name"]
    for table in ("bench_requests",):
        if recorded.rows(table):
            mine = [r for r in again.rows(table) if r.get("phase") != "warmup"]
            theirs = [r for r in recorded.rows(table) if r.get("phase") != "warmup"]
            assert [r["output_tokens"] for r in mine] == [r["output_tokens"] for r in theirs]
            assert [r["ttft_s"] for r in mine] == [r["ttft_s"] for r in theirs]


# -- chapters 03 and 04 over SSH -------------------------------------------------------------------

def _workers_left(marker: str) -> list[str]:
    import psutil

    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marker in cmd and "pytest" not in cmd:
            left.append(cmd[:200])
    return left


def _wait_gone(marker: str, within: float = 20.0) -> list[str]:
    deadline = time.monotonic() + within
    while (left := _workers_left(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@needs_sshd
@pytest.mark.slow
def test_nccl_grid_runs_torchrun_on_the_ssh_host(ssh_env, tmp_path):
    """Chapter 04's launches over SSH: gloo on the CPU (no GPU here), rows back, workers stopped on every path."""
    from servebook.hosts._ssh import SSHHost
    from servebook.nccl import Setting, available_backend, message_sizes, run_grid
    from servebook.results import RunStore

    store = RunStore.open(tmp_path / "runs", host="ssh://sbtest", run_id="nccl")
    spec = f"ssh://sbtest?python={os.sys.executable}"  # the host's interpreter with torch
    with RecordingHost(SSHHost(spec), store.path) as h:
        backend, world = available_backend(h)
        assert (backend, world) == available_backend()  # the same machine: the host's answer is this machine's
        sizes = message_sizes(64, 2, [1, 2], sweep=(1024,))
        summary = run_grid(store, sizes, [Setting(), Setting(NCCL_PROTO="LL")], timeout_s=120, backend=backend,
                           world_size=world, smoke=True, host=h, say=lambda _m: None)
        assert summary["measured"] == ["default"], (summary, store.rows("failures"))
        ar = store.table("allreduce")
        assert set(ar["bytes"]) == {s["bytes"] for s in sizes} and ar["sum_ok"].all()
        assert set(ar["backend"]) == {backend} and set(ar["world_size"]) == {world}
        assert (ar["us_median"] > 0).all() and {"eager"} <= set(ar["mode"])
        if backend == "gloo":
            assert set(ar["device"]) == {"cpu"} and store.rows("skipped")[0]["setting"] == "NCCL_PROTO=LL"
        calls = [json.loads(ln) for ln in (store.path / CASSETTE).read_text().splitlines()[1:]]
        launch = [c for c in calls if c.get("key") == "nccl allreduce_bench default"]
        assert len(launch) == 1 and launch[0]["rc"] == 0  # the launch went through the host
        assert not _wait_gone("allreduce_worker.py")
        # a launch whose call is stopped (its timeout on the host) takes its torchrun group with it
        t0, box = time.monotonic(), {}

        def hang():
            try:
                h.call("servebook.nccl:_hosted", {"fn": "allreduce_bench", "kwargs": {
                    "sizes_bytes": [1024], "backend": "gloo", "world_size": 2, "timeout_s": 600, "fault": "hang",
                    "iters": 2, "launches": 2, "eager_iters": 2, "warmup": 1, "repeats": 1}}, timeout=25, label="hang")
            except HostError as exc:
                box["err"] = exc

        th = threading.Thread(target=hang)
        th.start()
        while not _workers_left("allreduce_worker.py") and th.is_alive():
            time.sleep(0.2)
        assert _workers_left("allreduce_worker.py"), "the hanging launch never started its workers"
        th.join(90)
        assert "did not finish within 25 s" in str(box.get("err")) and time.monotonic() - t0 < 60
        assert not _wait_gone("allreduce_worker.py"), "torchrun workers outlived the stopped call"


@needs_sshd
@pytest.mark.slow
def test_book_chapters_03_and_04_over_ssh(ssh_env, tmp_path, embedded_model):
    """Chapter 03 (servers, greedy tokens, server info, single stream, port check) and 04 (torchrun) on the host."""
    from servebook.backends import force_each_backend
    from servebook.engines import get_engine
    from servebook.results import RunStore

    spec = f"ssh://sbtest?python={os.sys.executable}"
    res = _run_book(tmp_path, spec, ["03", "04"], "ssh34", record=True, backends="sdpa,eager", runs=2, max_tokens=8)
    assert [c["status"] for c in res.chapters] == ["ok", "ok"], res.chapters
    store = RunStore.at(res.run_dir)
    rows = {r["attention"]: r for r in store.rows("backends")}
    assert set(rows) == {"auto", "eager"}, store.rows("backends")  # smoke: the default and one forced backend
    for r in rows.values():
        assert r["outcome"] == "ok" and r["port_free_after"] is True and r["decode_tok_s"] > 0, r
    assert rows["eager"]["reported"] == "eager" and rows["auto"]["reported"] == "sdpa"
    assert rows["eager"]["agreement"] is not None and len(rows["auto"]["completions"]) == 4
    servers = [json.loads(ln) for ln in (store.path / "servers.jsonl").read_text().splitlines()]
    assert [r["event"] for r in servers] == ["started", "stopped"] * 2 and all(r["host"] == spec for r in servers)
    for r in servers:  # stopped on the host
        with pytest.raises(ProcessLookupError):
            os.killpg(r["pgid"], 0)
    assert "[servebook] loaded" in (store.path / "logs" / "transformers-eager.log").read_text()  # fetched from the host
    keys = [json.loads(ln).get("key", "") for ln in (store.path / CASSETTE).read_text().splitlines()[1:]]
    for want in ("greedy completions transformers auto", "greedy completions transformers eager", "nccl allreduce_bench default",
                 "nccl available_backend"):
        assert want in keys, want
    assert any(k.startswith("bench ") and "C=1" in k for k in keys)  # the single stream ran on the host
    ar = store.table("allreduce")
    assert len(ar) and ar["sum_ok"].all(), store.rows("failures")
    # the recording rebuilds both chapters here with no host: the same rows, interaction for interaction
    rep = _run_book(tmp_path, f"replay:{res.run_dir}", ["03", "04"], "ssh34-replay", backends="sdpa,eager", runs=2, max_tokens=8)
    assert [c["status"] for c in rep.chapters] == ["ok", "ok"], rep.chapters
    again = RunStore.at(rep.run_dir)
    drop = lambda r: {k: v for k, v in r.items() if k not in (*STAMPS, "seconds")}  # noqa: E731
    assert [drop(r) for r in again.rows("backends")] == [drop(r) for r in store.rows("backends")]
    assert [drop(r) for r in again.rows("allreduce")] == [drop(r) for r in store.rows("allreduce")]
    # the same sweep run here: the recorded rows have the same shape
    local = RunStore.open(tmp_path / "runs", run_id="local34")
    force_each_backend(get_engine("transformers"), embedded_model, [None], local, max_tokens=8, runs=2, progress=None)
    (mine,) = local.rows("backends")
    assert mine["outcome"] == "ok" and mine["reported"] == rows["auto"]["reported"]
    assert set(mine) == set(rows["auto"]), set(mine) ^ set(rows["auto"])


@needs_sshd
@pytest.mark.slow
@pytest.mark.envs
def test_engine_cli_is_read_on_the_ssh_host(ssh_env, tmp_path):
    """The engine's own parser is built in its interpreter on the host; servebook's scripts travel there."""
    from servebook.engines import get_engine
    from servebook.errors import EngineError
    from servebook.hosts._ssh import SSHHost
    from servebook.selection.envs import add_engine

    # prepared here when no other test has yet (tests run in parallel: add_engine lets one build it, the others wait)
    python = add_engine("sglang==0.5.9", progress=None).python
    with RecordingHost(SSHHost("ssh://sbtest"), tmp_path) as h:
        eng = get_engine("sglang==0.5.9", python=str(python))
        eng.host = h
        assert eng.cli_options()["method"] == "parser"
        launch = eng.launch(str(tmp_path), attention="triton", port=h.free_port())
        assert launch.cmd[-2:] == ["--attention-backend", "triton"]
        try:  # vLLM: its parser, or (without its requirements) its option strings read from its source on the host
            vpython = add_engine("vllm==0.33.0", progress=None, requirements=False).python
        except EngineError:
            vpython = None
        if vpython is not None:
            there = get_engine("vllm==0.33.0", python=str(vpython))
            there.host = h
            here = get_engine("vllm==0.33.0", python=str(vpython))
            assert there.cli_options()["method"] == here.cli_options()["method"]
            assert set(there.cli_options()["options"]) == set(here.cli_options()["options"])
    keys = [json.loads(ln).get("key", "") for ln in (tmp_path / CASSETTE).read_text().splitlines()[1:]]
    assert "ship cli_options.py" in keys and "ship _runner.py" in keys  # copied to the host, even under recording
    assert any(k.startswith("engine sglang script cli_options.py") for k in keys)


# -- secrets an engine prints on a remote host: masked as the host writes the log, and in the run's copy ---------

def _leaky():
    import importlib.util

    spec = importlib.util.spec_from_file_location("leaky_engine", ROOT / "tests" / "harness" / "leaky_engine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wait_for(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


@needs_sshd
@pytest.mark.timeout(180)
def test_secrets_an_engine_prints_on_an_ssh_host_are_masked_there_and_in_the_run(ssh_env, tmp_path):
    from servebook.servers import Launch

    leaky = _leaky()
    run = tmp_path / "run"
    h = _ssh(f"ssh://sbtest?python={os.sys.executable}")
    try:
        port = h.free_port()
        launch = Launch(cmd=[os.sys.executable, str(ROOT / "tests" / "harness" / "leaky_engine.py"), str(port), *leaky.LAUNCH_ARGS],
                        port=port, ready_path="/", engine="leaky", env=dict(leaky.LAUNCH_ENV))
        with h.serve(launch, run / "logs" / "leaky.log", registry=run / "servers.jsonl", ready_timeout=60, progress=None) as srv:
            remote = srv._remote_log
            assert _wait_for(lambda: "READY-MARKER" in h.read_text(remote, missing_ok=True), 20)
            leaky.check(h.read_text(remote), final=False)  # the host's own log, while the server runs
            srv.log_tail()  # the run's copy
            leaky.check((run / "logs" / "leaky.log").read_text(), final=False)
        leaky.check(h.read_text(remote), final=True)  # stopped: its last words are in the host's log, masked
        leaky.check((run / "logs" / "leaky.log").read_text(), final=True)
        for path in run.rglob("*"):
            text = path.read_text(errors="replace") if path.is_file() else ""
            assert not [f for f, raw in leaky.SECRETS.items() if raw in text], path
            assert not [f for f, halves in leaky.SPLIT.items() if any(h in text for h in halves)], path
        with pytest.raises(ProcessLookupError):
            os.killpg(srv.proc.pgid, 0)
    finally:
        h.close()


@needs_sshd
@pytest.mark.timeout(180)
def test_secrets_on_an_ssh_host_stay_masked_when_the_book_is_killed(ssh_env, tmp_path):
    """SIGKILL of the process holding the SSH connection: the watchdog stops the server, its copier writes the last
    output masked and ends; the host's log never holds a raw secret, and nothing is left running there."""
    leaky = _leaky()
    run = tmp_path / "run"
    driver = (
        "import os, sys, time\n"
        "from servebook.hosts._ssh import SSHHost\n"
        "from servebook.servers import Launch\n"
        f"h = SSHHost('ssh://sbtest?python={os.sys.executable}')\n"
        "port = h.free_port()\n"
        f"launch = Launch(cmd=[{os.sys.executable!r}, {str(ROOT / 'tests' / 'harness' / 'leaky_engine.py')!r}, str(port), *{leaky.LAUNCH_ARGS!r}],"
        f" port=port, ready_path='/', engine='leaky', env={dict(leaky.LAUNCH_ENV)!r})\n"
        f"srv = h.serve(launch, {str(run / 'logs' / 'leaky.log')!r}, ready_timeout=60, progress=None)\n"
        "print(srv.proc.pgid, srv._remote_log, flush=True)\n"
        "time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    proc = subprocess.Popen([os.sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    pgid = None
    try:
        line = proc.stdout.readline().split()
        assert line, "the driver did not start the server"
        pgid, remote = int(line[0]), line[1]
        assert _wait_for(lambda: "READY-MARKER" in Path(remote).read_text(), 20)  # the host is this machine
        leaky.check(Path(remote).read_text(), final=False)
        proc.kill()
        proc.wait(timeout=10)

        def gone():
            try:
                os.killpg(pgid, 0)
                return False
            except ProcessLookupError:
                return True
        assert _wait_for(gone, 30), "the watchdog did not stop the server when the connection dropped"
        assert _wait_for(lambda: "BYE-MARKER" in Path(remote).read_text(), 15), Path(remote).read_text()
        leaky.check(Path(remote).read_text(), final=True)
        for path in run.rglob("*"):  # what the run fetched before the kill
            text = path.read_text(errors="replace") if path.is_file() else ""
            assert not [f for f, raw in leaky.SECRETS.items() if raw in text], path
            assert not [f for f, halves in leaky.SPLIT.items() if any(h in text for h in halves)], path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if pgid:
            try:
                os.killpg(pgid, 9)
            except ProcessLookupError:
                pass
