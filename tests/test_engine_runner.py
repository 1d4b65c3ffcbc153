"""The engine runners chapter 02 starts (what-if, decode path, environment probes) end with the process that asked.

A runner is a subprocess in the engine's interpreter; ``selection.envs._ask`` runs it in a process group of its own
with a reaper, so a kernel that is interrupted or killed (SIGKILL included) leaves no runner behind, and a runner that
outlives its timeout is stopped and reported as such.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from servebook.selection.envs import _ask

LIB = str(Path(__file__).resolve().parents[1] / "lib")


def _runner(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "runner.py"
    p.write_text(textwrap.dedent(body))
    return p


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_result_error_and_timeout(tmp_path):
    ok = _runner(tmp_path, """
        import json, sys
        req = json.load(sys.stdin)
        print("noise"); print("SERVEBOOK_RESULT " + json.dumps({"ok": True, "echo": req["x"]}))
    """)
    assert _ask(sys.executable, ok, {"x": 7}, 60, "the runner") == {"ok": True, "echo": 7}
    bad = _runner(tmp_path, "import sys\nprint('ValueError: no such backend', file=sys.stderr)\nsys.exit(3)\n")
    assert _ask(sys.executable, bad, {}, 60, "the runner") == {"ok": False, "error": "ValueError: no such backend"}
    slow = _runner(tmp_path, "import time\ntime.sleep(60)\n")
    t0 = time.monotonic()
    res = _ask(sys.executable, slow, {}, 1, "the engine's resolution")
    assert res == {"ok": False, "error": "the engine's resolution did not finish in 1s"} and time.monotonic() - t0 < 20


def test_a_killed_asker_leaves_no_runner(tmp_path):
    pidfile = tmp_path / "runner.pid"
    runner = _runner(tmp_path, f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(120)
    """)
    asker = subprocess.Popen([sys.executable, "-c", "import sys; from servebook.selection.envs import _ask; "
                              f"_ask(sys.executable, {str(runner)!r}, {{}}, 600, 'the runner')"],
                             env={**os.environ, "PYTHONPATH": LIB}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = int(pidfile.read_text())
        assert _alive(pid)
        asker.send_signal(signal.SIGKILL)  # as a kernel killed mid-cell: no handler of its own runs
        asker.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not _alive(pid), "the runner outlived the process that asked it"
    finally:
        if asker.poll() is None:
            asker.kill()
