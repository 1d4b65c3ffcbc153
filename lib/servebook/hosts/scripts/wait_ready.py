"""Wait on a host until a server answers HTTP 200, or its process group exits, or a timeout passes.

    python3 wait_ready.py URL PGID TIMEOUT_S   ->  {"ready": true, "elapsed_s": 3.2}
                                                   {"ready": false, "why": "exited" | "timeout", "elapsed_s": ...}

Sent to the host on stdin by ``hosts._serve.HostServer.start``; standard library only.
"""

import json
import os
import sys
import time
import urllib.request


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main(url: str, pgid: int, timeout: float) -> dict:
    t0 = time.monotonic()
    while True:
        elapsed = round(time.monotonic() - t0, 2)
        if not _alive(pgid):
            return {"ready": False, "why": "exited", "elapsed_s": elapsed}
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return {"ready": True, "elapsed_s": round(time.monotonic() - t0, 2)}
        except Exception:  # noqa: BLE001 - not up yet: any failure means "try again"
            pass
        if time.monotonic() - t0 > timeout:
            return {"ready": False, "why": "timeout", "elapsed_s": round(time.monotonic() - t0, 2)}
        time.sleep(0.25)


print(json.dumps(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
