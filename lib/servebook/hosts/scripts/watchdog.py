"""Run one long process on a host and stop its process group when the caller goes away.

Sent to the host as ``python3 -c "$(cat watchdog.py)"`` (``hosts._base.watchdog_command``); its first stdin line is
the JSON spec ``{"argv", "env", "log", "shell"}`` (so the environment never shows in a process list). It starts
the command in its own session (process group), output to the log, prints ``{"pgid": N}``, then waits on its
own stdin. A line ``stop GRACE`` or EOF on stdin (the caller asked to stop, closed the channel, or the
connection dropped) stops the group: TERM, grace, KILL; it prints ``{"stopped": N, "returncode": RC}``.
With ``masker`` in the spec (servebook's masker source, ``secrets.masker_source``) the output reaches the log through a
pipe and a thread that masks secrets line by line as it writes (``values``: the secrets to mask by value, besides the
environment's credentials): the log on the host never holds a raw secret either.
"""

import json
import os
import signal
import subprocess
import sys
import threading
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
    masker = None
    if spec.get("masker"):  # servebook/secrets.py's source: the output goes through its copy_masked
        masker = {"__name__": "servebook_log_copier"}
        exec(compile(spec["masker"], "servebook/secrets.py", "exec"), masker)
    shell = spec.get("shell", "")
    with open(spec["log"], "ab") as log:
        log.write(("$ " + (masker["mask_text"](shell, spec.get("values") or []) if masker else shell) + "\n").encode())
    if masker:
        r, out = os.pipe()
    else:
        out = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        proc = subprocess.Popen(spec["argv"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    except OSError as exc:
        print(json.dumps({"error": f"{spec['argv'][0]}: {exc}"}), flush=True)
        sys.exit(127)
    finally:
        os.close(out)
    copier = None
    if masker:  # ends when the group's last process closes the pipe
        values = sorted(set(masker["env_secret_values"](env)) | set(spec.get("values") or []), key=len, reverse=True)
        copier = threading.Thread(target=masker["copy_masked"], args=(r, spec["log"], values), daemon=True)
        copier.start()
    print(json.dumps({"pgid": proc.pid}), flush=True)
    line = sys.stdin.readline()
    _stop(proc, float(line.split()[1]) if line.startswith("stop ") else 10.0)
    proc.poll()
    if copier is not None:
        copier.join(timeout=10)  # the last output is in the log before the caller reads it
    print(json.dumps({"stopped": proc.pid, "returncode": proc.returncode}), flush=True)


main()
