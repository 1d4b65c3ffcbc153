"""Server teardown with the real embedded engine: nothing left running, the port free."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from servebook.engines import get_engine
from servebook.errors import ServerError
from servebook.processes import free_port, port_listening
from servebook.servers import Launch, Server


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_start_serve_stop(embedded_model, tmp_path, no_leftover_servers):
    eng = get_engine("transformers")
    launch = eng.launch(str(embedded_model), attention="eager")
    assert launch.host == "127.0.0.1"
    with Server.start(launch, tmp_path / "log", ready_timeout=180, registry=tmp_path / "servers.jsonl", progress=None) as srv:
        pid = srv.proc.pid
        assert eng.loaded_from_log(srv.log_path.read_text())[0]["attn"] == "eager"
    assert not _alive(pid)
    assert not port_listening(launch.port)


def test_wrong_model_path_is_a_clear_error(tmp_path, no_leftover_servers):
    eng = get_engine("transformers")
    launch = eng.launch(str(tmp_path / "no-model"))
    with pytest.raises(ServerError) as info:
        Server.start(launch, tmp_path / "log", ready_timeout=120, progress=None)
    assert "exited with code" in str(info.value) and info.value.log_tail
    assert not port_listening(launch.port)


def test_port_taken(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        launch = Launch(cmd=[sys.executable, "-c", "pass"], port=port)
        with pytest.raises(ServerError, match="already in use"):
            Server.start(launch, tmp_path / "log", progress=None)
    finally:
        s.close()


def test_hanging_server_times_out_and_group_is_stopped(tmp_path):
    # A server that forks a child and never answers: both must be gone after the timeout.
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    launch = Launch(cmd=[sys.executable, "-c", code], port=free_port())
    with pytest.raises(ServerError, match="did not answer"):
        Server.start(launch, tmp_path / "log", ready_timeout=2, progress=None)
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if "time.sleep(600)" in " ".join(p.info["cmdline"] or [])]
    assert not left


def test_killed_parent_takes_the_server_down(tmp_path):
    """kill -9 of the process that started a server (a kernel killed on cell timeout) still stops it."""
    port = free_port()
    driver = textwrap.dedent(f"""
        import sys
        from servebook.servers import Launch, Server
        code = "import http.server, socketserver; socketserver.TCPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()"
        srv = Server.start(Launch(cmd=[sys.executable, '-c', code], port={port}, ready_path='/'), {str(tmp_path / 'log')!r}, progress=None)
        print(srv.pgid, flush=True)
        import time; time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    pgid = int(proc.stdout.readline())
    assert port_listening(port)
    proc.kill()
    proc.wait()
    deadline = time.time() + 20
    while time.time() < deadline and port_listening(port):
        time.sleep(0.2)
    assert not port_listening(port)
    assert not _alive(pgid)  # the server was the group leader; a zombie awaiting its reaper counts as gone


def test_keyboard_interrupt_stops_the_server(tmp_path):
    port = free_port()
    code = f"import http.server, socketserver; socketserver.TCPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()"
    launch = Launch(cmd=[sys.executable, "-c", code], port=port, ready_path="/")
    with pytest.raises(KeyboardInterrupt):
        with Server.start(launch, tmp_path / "log", progress=None) as srv:
            pid = srv.proc.pid
            raise KeyboardInterrupt
    assert not _alive(pid) and not port_listening(port)


def test_free_port_never_hands_out_a_recent_port_again(monkeypatch):
    """Servers launched together each pick a port before any binds one, and the OS may offer a port just released
    again (here it does, by script): the picks must still differ."""
    import servebook.processes as processes

    offered = iter([47001, 47001, 47001, 47002])

    class _Socket:
        def __init__(self, *a, **k):
            self.port = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(processes.socket, "socket", _Socket)
    assert [processes.free_port(), processes.free_port()] == [47001, 47002]
