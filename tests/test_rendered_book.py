"""The rendered book in a real browser: Debian's headless Chromium, driven over the DevTools protocol.

Every page must load without console errors or failed loads, show its plots (``img`` elements that
decoded: naturalWidth > 0), and have no error cells; a chapter that failed must show papermill's banner
and ours. Screenshots go next to the pages (``<site>/screenshots/``).

Sites checked: the recorded H200 x2 run rendered afresh (build/rendered-test/h200x2), the committed
render (rendered/h200x2), and a run whose chapter 06 failed for real (a compare_with that does not exist).
CI installs the browser (.ci/run: apt-get install -y chromium).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from servebook.paths import book_root

CHROMIUM = "/usr/bin/chromium"
ROOT = book_root()
H200 = ROOT / "data" / "runs" / "h200x2-book"
PAGES = ["01_detect_capabilities", "02_read_backend_selection", "03_force_each_backend", "04_tune_nccl",
         "05_benchmark_single_stream", "06_findings"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--remote-allow-origins=*",
         "--window-size=1280,900", "--hide-scrollbars"]

_PAGE_FACTS = """(async () => {
  const imgs = Array.from(document.images);
  await Promise.all(imgs.map(i => i.decode().catch(() => null)));
  const visible = el => { if (!el) return false; const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
                          return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const banner = Array.from(document.querySelectorAll('span')).find(s => s.textContent.includes('An Exception was encountered'));
  return JSON.stringify({
    title: document.title,
    images: imgs.map(i => ({src: i.src.slice(0, 40), width: i.naturalWidth, complete: i.complete})),
    error_cells: document.querySelectorAll('.celltag_sb-error').length,
    papermill_banner: visible(banner),
    our_banner: visible(document.getElementById('sb-failed')),
    ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
    code_cells: document.querySelectorAll('.jp-CodeCell .jp-InputArea .highlight').length,
    nav: !!document.querySelector('.sb-nav'),
    details: document.querySelectorAll('details summary').length,
    text: document.body.innerText.slice(0, 20000),
  });
})()"""


class Browser:
    """A headless Chromium and one page, spoken to over the DevTools protocol (websocket-client)."""

    def __init__(self) -> None:
        import websocket

        self.profile = Path(tempfile.mkdtemp(prefix="sb-chromium-"))
        self.log = open(self.profile / "chromium.log", "wb")
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self.profile / 'data'}", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = self.profile / "data" / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start: {(self.profile / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        self.ws.settimeout(timeout)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == event:
                    return
        raise TimeoutError(event)

    def open(self, path: Path, screenshot: Path | None = None) -> dict:
        """Load a page; its facts, plus the console errors and failed loads seen while it loaded."""
        self.events = []
        self.call("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_for("Page.loadEventFired")
        facts = json.loads(self.call("Runtime.evaluate", {"expression": _PAGE_FACTS, "awaitPromise": True,
                                                           "returnByValue": True})["result"]["value"])
        errors = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                errors.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append("log: " + str(p["entry"].get("text")) + " " + str(p["entry"].get("url", "")))
            elif e["method"] == "Network.loadingFailed":
                errors.append("load failed: " + str(p.get("errorText")))
        facts["console_errors"] = errors
        if screenshot is not None:
            shot = self.call("Page.captureScreenshot", {"format": "png"})
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return facts

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                import os
                import signal

                os.killpg(self.proc.pid, signal.SIGTERM)  # chromium's own process group (start_new_session)
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=20)
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    b = Browser()
    yield b
    b.close()


@pytest.fixture(scope="module")
def h200_site():
    from servebook.book import render_book

    out = ROOT / "build" / "rendered-test" / "h200x2"
    shutil.rmtree(out, ignore_errors=True)
    render_book(H200, out)
    return out


def _check_site(browser, site: Path, failed: tuple[str, ...] = ()) -> dict:
    index = browser.open(site / "index.html", site / "screenshots" / "index.png")
    assert not index["console_errors"], index["console_errors"]
    assert "This run" in index["text"] and "host" in index["text"] and "date" in index["text"]
    pages = {}
    for stem in PAGES:
        if not (site / f"{stem}.html").exists():
            continue
        assert f"{stem}.html" in index["links"]
        facts = browser.open(site / f"{stem}.html", site / "screenshots" / f"{stem}.png")
        pages[stem] = facts
        assert not facts["console_errors"], (stem, facts["console_errors"])
        assert facts["nav"] and "index.html" in facts["links"]
        assert facts["code_cells"] > 0, f"{stem}: the teaching code is not visible"
        for img in facts["images"]:
            assert img["complete"] and img["width"] > 0, (stem, img)
        if stem in failed:
            assert facts["papermill_banner"] and facts["our_banner"], stem
            assert facts["error_cells"] > 0
        else:
            assert facts["error_cells"] == 0 and not facts["our_banner"], stem
    return pages


def test_h200_book_in_a_browser(browser, h200_site):
    pages = _check_site(browser, h200_site)
    assert set(pages) == set(PAGES)
    # plots inline: chapter 04 (NCCL latencies) and 05 (throughput) draw at least one each
    assert pages["04_tune_nccl"]["images"] and pages["05_benchmark_single_stream"]["images"]
    assert all((h200_site / "screenshots" / f"{s}.png").stat().st_size > 10_000 for s in PAGES)


def test_findings_links_resolve(browser, h200_site):
    """Every link chapter 06 makes to another chapter lands on an element id of that page."""
    from urllib.parse import unquote

    found = browser.open(h200_site / "06_findings.html")
    targets = [h for h in found["links"] if h.startswith("0") and "#" in h]
    assert len(targets) >= 6
    ids = {}
    for href in targets:
        page, frag = href.split("#", 1)
        if page not in ids:
            ids[page] = set(browser.open(h200_site / page)["ids"])
        assert unquote(frag) in ids[page], href
    assert found["details"] >= 2  # Check yourself: answers folded in <details>
    assert "Comparison with other runs" in found["text"] and "1gpu" in found["text"]


def test_committed_render_loads(browser):
    site = ROOT / "rendered" / "h200x2"
    assert (site / "index.html").exists(), "rendered/h200x2 is missing: servebook html data/runs/h200x2-book --out rendered/h200x2"
    with tempfile.TemporaryDirectory() as tmp:  # screenshots of the committed site go to a scratch copy, not into git
        copy = Path(tmp) / "h200x2"
        shutil.copytree(site, copy)
        pages = _check_site(browser, copy)
    assert set(pages) == set(PAGES)
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert total < 6 * 2**20, f"rendered/h200x2 is {total / 2**20:.1f} MiB"


def test_failed_chapter_shows_banners(browser, tmp_path, embedded_model):
    """A chapter that really fails (06 asked to compare with a run that does not exist) shows papermill's banner."""
    from servebook.book import run_book

    result = run_book({"smoke": True}, out=tmp_path / "site", runs_root=tmp_path / "runs", only=["06"],
                      extra={"compare_with": str(tmp_path / "no-such-run")}, progress=None)
    assert result.chapters[0]["status"] == "failed" and "compare_with" in result.chapters[0]["error"]
    site = ROOT / "build" / "rendered-test" / "failed"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(result.out, site)
    pages = _check_site(browser, site, failed=("06_findings",))
    assert "An Exception was encountered" in pages["06_findings"]["text"]
    index = browser.open(site / "index.html")
    assert "failed" in index["text"]
