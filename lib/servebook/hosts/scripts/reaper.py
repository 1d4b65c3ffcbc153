"""Stop a local server's process group once the servebook process that started it dies (kill -9 included).

Started by ``servers.Server.start`` beside each server it starts, in a session of its own:

    python reaper.py PARENT_PID PGID

It polls both every half second; when the parent is gone and the group is still alive, it sends the group
TERM, waits up to 10 s, then KILL (5 s). It ends by itself when the group ends first. (On a remote host the
watchdog, ``watchdog.py``, does the same for what it started.)
"""

import os
import signal
import sys
import time


def exists(probe, ident: int) -> bool:
    """Whether ``probe(ident, 0)`` finds it: ``os.kill`` for a process, ``os.killpg`` for a group (one that is not
    ours to signal still exists)."""
    try:
        probe(ident, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main(parent: int, pgid: int) -> None:
    while exists(os.kill, parent) and exists(os.killpg, pgid):
        time.sleep(0.5)
    if not exists(os.killpg, pgid):
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.time() + wait
        while time.time() < end and exists(os.killpg, pgid):
            time.sleep(0.1)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
