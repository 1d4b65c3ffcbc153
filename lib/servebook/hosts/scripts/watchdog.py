"""Run one long process on a host and stop its process group when the caller goes away.

Sent to the host as ``python3 -c "$(cat watchdog.py)"`` (``hosts._base.watchdog_command``); its first stdin line is
the JSON spec ``{"argv", "env", "log", "shell"}`` (so the environment never shows in a process list). It starts
the command in its own session (process group), output to the log, prints ``{"pgid": N}``, then waits on its
own stdin. A line ``stop GRACE`` or EOF on stdin (the caller asked to stop, closed the channel, or the
connection dropped) stops the group: TERM, grace, KILL; it prints ``{"stopped": N, "returncode": RC}``.
"""

import json
import os
import signal
import subprocess
import sys
import time


def _alive(pid: int, proc: subprocess.Popen) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    proc.poll()
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _stop(proc: subprocess.Popen, grace: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            proc.poll()
            if not _alive(proc.pid, proc):
                return
            time.sleep(0.1)


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    log = open(spec["log"], "ab")
    log.write(("$ " + spec.get("shell", "") + "\n").encode())
    log.flush()
    try:
        proc = subprocess.Popen(spec["argv"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    except OSError as exc:
        print(json.dumps({"error": f"{spec['argv'][0]}: {exc}"}), flush=True)
        sys.exit(127)
    print(json.dumps({"pgid": proc.pid}), flush=True)
    line = sys.stdin.readline()
    _stop(proc, float(line.split()[1]) if line.startswith("stop ") else 10.0)
    proc.poll()
    print(json.dumps({"stopped": proc.pid, "returncode": proc.returncode}), flush=True)


main()
