"""The report in a real headless browser (issue 6): it renders offline, and hostile model output stays text.

Skips when Debian's chromium is not installed (CI installs it). The session is
made through the store and judged by the real `evaluate` (tests/support/judged_sessions.py
`make_session`), with a stored completion that is an XSS attempt.
"""

from __future__ import annotations

import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from observatory.report.data import build
from observatory.report.html import render_session
from observatory.store.session_store import Store
from tests.support.judged_sessions import HOSTILE, make_session

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="/usr/bin/chromium is not installed (apt-get install chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                              capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        # An alert() dialog blocks a headless page forever: a hang here means a script ran.
        pytest.fail("chromium did not finish in 120 s: a script may have opened a dialog")


class _Dom(HTMLParser):
    """Text and the suspicious parts of a serialized DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.findings: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "img", "iframe", "object", "embed"):
            self.findings.append(f"<{tag}> element")
        self.findings += [f"{tag} has {k}" for k, _ in attrs if k.startswith(("on", "data-pwned"))]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _dom(html: str) -> _Dom:
    d = _Dom()
    d.feed(html)
    return d


def _png(path: Path) -> tuple[int, int, bytes]:
    """(width, height, decompressed pixel rows) of a PNG, with the standard library only."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    idat, i = b"", 8
    while i < len(raw):
        n, kind = struct.unpack(">I4s", raw[i:i + 8])
        if kind == b"IDAT":
            idat += raw[i + 8:i + 8 + n]
        i += 12 + n
    return width, height, zlib.decompress(idat)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rendered report of a judged session whose echo probe returned an XSS attempt."""
    tmp = tmp_path_factory.mktemp("browser")
    store = Store(str(tmp / "runs.db"))
    return render_session(build(store, make_session(store, batch_divergence="mtp1")), tmp / "report")


def test_screenshot_is_a_real_page(report: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    run = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,2000", report.as_uri())
    assert png.is_file(), run.stderr[-2000:]
    width, height, pixels = _png(png)
    assert (width, height) == (1400, 2000)
    assert len(set(pixels)) > 50, "the screenshot is (nearly) blank"


@pytest.mark.parametrize("page", ["index.html", "results/2-3.html"], ids=["index", "echo-detail"])
def test_hostile_output_is_inert_text_in_the_live_dom(report: Path, tmp_path: Path, page: str) -> None:
    run = _chromium(tmp_path, "--dump-dom", "--enable-logging=stderr", "--v=0", (report.parent / page).as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = _dom(run.stdout)
    assert HOSTILE in "".join(dom.text)
    assert dom.findings == []
    # A console message would mean a script ran or the CSP refused a load (an external resource).
    assert "CONSOLE" not in run.stderr and "Refused to" not in run.stderr, run.stderr[-2000:]


def test_the_dom_check_trips_on_unescaped_markup(report: Path, tmp_path: Path) -> None:
    """Negative control (docs/design.md mistake 13): the same check on a page with raw markup fails."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><img src=x onerror=\"document.body.setAttribute('data-pwned', '1')\">"
                   "</body></html>")
    run = _chromium(tmp_path, "--dump-dom", bad.as_uri())
    dom = _dom(run.stdout)
    assert "<img> element" in dom.findings and "img has onerror" in dom.findings
    assert "body has data-pwned" in dom.findings  # the handler ran: the live DOM shows it
