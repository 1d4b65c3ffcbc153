"""A fake SSE server for measuring the client itself: ``with FakeSSEServer(...) as fake: run_requests(fake.url, ...)``.

The server is a real file, ``scripts/fake_sse_server.py``, run in its own process (and process group).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..errors import ServerError

__all__ = ["FakeSSEServer"]

_SCRIPT = Path(__file__).parent / "scripts" / "fake_sse_server.py"


class FakeSSEServer:
    """A local OpenAI-style SSE server that emits tokens as fast as it can (or at a fixed gap).

        with FakeSSEServer(tokens_per_event=4, events_per_write=1, delay_s=0.005) as fake:
            run_requests(fake.url, "fake-sse", ["hi"], max_tokens=64)

    It is a test fixture, clearly not an engine: every event carries ``tokens_per_event``
    copies of ``word``; ``events_per_write`` events go out per socket write, ``delay_s`` apart;
    the first waits ``ttft_s`` after the response headers; ``cpu`` pins it; ``fail_status`` (e.g. 500) answers every
completion with that status instead (a server whose every request fails); ``done_delay_s`` sends the finishing event
and [DONE] that much later than the last text (a server that ends its stream late). Paced
    (``delay_s``/``ttft_s`` > 0) it is a server whose timing is known and steady, for comparing clients.
    """

    def __init__(self, tokens_per_event: int = 1, events_per_write: int = 64, delay_s: float = 0.0,
                 cpu: int | None = None, word: str = " the", ttft_s: float = 0.0, fail_status: int = 0, done_delay_s: float = 0.0):
        from ..processes import free_port

        self.port = free_port()
        self.args = [str(self.port), str(tokens_per_event), str(events_per_write), str(delay_s),
                     str(-1 if cpu is None else cpu), word, str(ttft_s), str(int(fail_status)), str(done_delay_s)]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeSSEServer":
        self.proc = subprocess.Popen([sys.executable, str(_SCRIPT), *self.args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.proc.stdout.readline()
        if b"ready" not in line:
            self.stop()
            raise ServerError(f"the fake SSE server did not start: {line.decode(errors='replace')[:300]}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            from ..processes import stop_process_group

            stop_process_group(self.proc.pid, grace_s=3)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "FakeSSEServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
