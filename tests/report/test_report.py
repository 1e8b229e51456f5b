"""The HTML report (issue 6): every section, escaping of untrusted output, the verdict banner,
missing figures, token diffs, cross-session pages, and the `report` command.

Sessions are made through the real store and judged by the real `evaluate`
(gates, figures, validity); cases a session cannot easily show (a crashed
arm, missing figures) change a real `build()` view (tests/support/views.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.judge.verdict import session_verdict
from observatory.model.read_model import SessionView
from observatory.report.data import build
from observatory.report.html import CROSS_BANNER, overall, render_cross, render_session
from observatory.store.session_store import Store
from tests.support import views
from tests.support.judged_sessions import HOSTILE, HOSTILE_ESCAPED, make_session, report_cli


def _pages(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text(encoding="utf-8") for p in out.rglob("*.html")}


class _Attrs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Attrs()
    p.feed(html)
    return p.tags


def test_report_has_every_section(data: SessionView, tmp_path: Path) -> None:
    index = render_session(data, tmp_path / "r")
    html = index.read_text()
    for heading in ("Verdict: FAIL", "Session", "Arms", "Probes × arms", "Token diffs", "Acceptance",
                    "Acceptance by probe category", "Speed", "Speedup and what a spec step costs", "A/A noise floor"):
        assert f">{heading}<" in html or heading in html, heading
    pages = _pages(tmp_path / "r")
    assert len(pages) == 1 + 4 * 4  # index + one page per arm x probe
    assert "NVIDIA H200" in html and "560.35" in html and "0.32.0" in html
    assert "τ &gt; r" in html and "break-even α &gt; c" in html
    assert "token-identity rate <b>100.0%</b>" in html  # base#2 is the A/A control
    assert html.count("<svg") >= 2 * 2 + 2  # per-position + histogram for 2 spec arms, speed, throughput
    assert "c=4 tok/s" in html


def test_divergences_show_both_continuations_and_margin(data: SessionView, tmp_path: Path) -> None:
    html = render_session(data, tmp_path / "r").read_text()
    diffs = html[html.index('id="diffs"'):html.index('id="acceptance"')]
    assert "first divergence at token <b>4</b>" in diffs and "margin <b>3.000</b>" in diffs
    assert "kind <b>diverged</b>" in diffs and "kind <b>near_tie</b>" in diffs
    assert '<span class="tok div"> 5</span>' in diffs and '<span class="tok div"> 3</span>' in diffs
    assert '<span class="tok div">到</span>' in diffs and '<span class="tok div">处</span>' in diffs
    assert overall(data)["verdict"] == "FAIL"
    detail = (tmp_path / "r" / "results" / "3-0.html").read_text()  # mtp2 / count
    assert "margin <b>3.000</b>" in detail and "token_diff" in detail


def test_lower_bound_margin_is_flagged(data: SessionView, tmp_path: Path) -> None:
    r = next(r for r in data.arms[3].results if r.probe == "count")
    v = r.verdicts["token_diff"]
    d = views.result(data, 3, "count", verdicts={
        **r.verdicts, "token_diff": replace(v, details={**(v.details or {}), "margin": 5.9,
                                                        "margin_is_lower_bound": True})})
    html = render_session(d, tmp_path / "r").read_text()
    assert "margin <b>≥ 5.900</b>" in html and "lower bound" in html


def test_stream_and_batch_divergences_are_shown(store: Store, tmp_path: Path) -> None:
    d = build(store, make_session(store, divergences={}, batch_divergence="mtp1"))
    html = render_session(d, tmp_path / "r").read_text()
    assert "token_diff:batch" in html and "in a concurrent batch differs" in html
    assert overall(d)["verdict"] == "FAIL"  # a hard divergence in a batch is a failure too


def test_hostile_output_is_escaped_everywhere(data: SessionView, tmp_path: Path) -> None:
    """A completion containing markup comes out as text."""
    render_session(data, tmp_path / "r")
    pages = _pages(tmp_path / "r")
    echo = pages["results/2-3.html"]  # mtp1 / echo: full text, tokens, prompt
    assert HOSTILE_ESCAPED in echo
    assert HOSTILE_ESCAPED in pages["index.html"]  # the 80-character preview
    for name, html in pages.items():
        assert "<script" not in html, name
        assert "<img" not in html, name
        assert not any("onerror" in attrs for _, attrs in _tags(html)), name


def test_hostile_names_are_escaped_in_svg_and_attributes(data: SessionView, tmp_path: Path) -> None:
    evil = '"><svg onload=alert(3)>'
    acc = data.arms[2].figures.acceptance or {}
    d = views.figures(data, 2, acceptance={**acc, "by_category": {evil: acc["by_category"]["prose_en"]}})
    d = views.arm(d, 2, name=evil, log_tail=HOSTILE, status="crashed")
    render_session(d, tmp_path / "r")
    for name, html in _pages(tmp_path / "r").items():
        assert "<svg onload" not in html, name
        assert not any("onload" in attrs for _, attrs in _tags(html)), name
    html = (tmp_path / "r" / "index.html").read_text()
    assert "&#34;&gt;&lt;svg onload=alert(3)&gt;" in html and HOSTILE_ESCAPED in html


def test_no_external_resources_and_every_link_resolves(data: SessionView, tmp_path: Path) -> None:
    out = tmp_path / "r"
    render_session(data, out)
    pages = _pages(out)
    ids = {name: {a["id"] for _, a in _tags(html) if a.get("id")} for name, html in pages.items()}
    for name, html in pages.items():
        assert "@import" not in html and "url(" not in html, name
        for tag, attrs in _tags(html):
            for key in ("href", "src"):
                link = attrs.get(key)
                if not link or tag == "svg":
                    continue
                page, _, frag = link.partition("#")
                target = str(((out / name).parent / page).resolve().relative_to(out.resolve())) if page else name
                if frag:  # an anchor (the banner's links to evidence) names an element of its page
                    assert frag in ids.get(target, set()), (name, link)
                if not page:
                    continue
                assert "://" not in link and not link.startswith("//"), (name, link)
                assert ((out / name).parent / page).resolve().is_file(), (name, link)


def _clean(store: Store) -> SessionView:
    return build(store, make_session(store, divergences={}))


@pytest.mark.parametrize(
    ("change", "verdict", "reason"),
    [
        (lambda d: d, "PASS", None),
        (lambda d: views.arm(d, 2, status="crashed", reason="engine exited with status 1 mid-run",
                             validity=views.validity(("CRASHED", "engine exited")),
                             log_tail="Traceback\n<b>illegal memory access</b>"),
         "INVALID", "arm mtp1: CRASHED: engine exited"),
        (lambda d: views.arm(d, 3, validity=views.validity(("INVALID", "speculation inactive"))),
         "INVALID", "INVALID: speculation inactive"),
        (lambda d: views.arm(d, 0, validity=views.validity(("CONFOUNDED", "--max-model-len differs"))),
         "INVALID", "CONFOUNDED"),
        (lambda d: views.arm(d, 2, validity=views.validity(("LOW_N", "30 drafts < 200"))),
         "PASS", "LOW_N: 30 drafts"),
        (lambda d: views.arm(views.session(d, status="interrupted", reason="SIGTERM"), 3, status="interrupted",
                             validity=views.validity(("INVALID", "arm interrupted"))),
         "INVALID", "session interrupted: SIGTERM"),
        (lambda d: views.every_result(views.every_result(d, 2, verdict="NOT_DISCRIMINATING"), 3,
                                      verdict="NOT_DISCRIMINATING"),
         "PASS", "arm mtp1: no probe discriminates"),
    ],
    ids=["clean", "crashed-arm", "invalid-arm", "confounded-base", "low-n", "interrupted", "nothing-discriminates"],
)
def test_verdict_banner(store: Store, tmp_path: Path, change: Any, verdict: str, reason: str | None) -> None:
    d = change(_clean(store))
    banner = overall(d)
    assert banner["verdict"] == verdict == session_verdict(d)[0]  # the nightly gate's verdict
    worst = next((x["level"] for x in banner["reasons"] if x["level"] != "NOTE"), "PASS")
    assert worst == verdict  # the listed reasons follow the same policy
    if reason:
        assert any(reason in r["text"] for r in banner["reasons"]), banner["reasons"]
    html = render_session(d, tmp_path / "r").read_text()
    assert f"Verdict: {verdict}" in html


def test_crashed_arm_shows_its_escaped_log_tail(store: Store, tmp_path: Path) -> None:
    d = views.arm(_clean(store), 2, status="crashed", reason="engine exited",
                  log_tail="Traceback\n<b>illegal memory access</b>")
    html = render_session(d, tmp_path / "r").read_text()
    assert "<details><summary>log tail" in html
    assert "&lt;b&gt;illegal memory access&lt;/b&gt;" in html and "<b>illegal" not in html


def test_missing_figures_render_as_dashes(data: SessionView, tmp_path: Path) -> None:
    d = data
    for i in range(len(d.arms)):
        d = views.figures(d, i, acceptance=None, speed=None, vs_base=None, noise_floor=None)
        d = views.every_result(d, i, verdict=None, ttft_ms=None, duration_ms=None, usage={}, finish_reason=None)
    d = views.figures(d, 3, vs_base={"S": None, "r": None, "ci": None})
    d = views.session(d, machine={}, gpu=None, finished_at=None, command=[])
    html = render_session(d, tmp_path / "r").read_text()
    assert html.count("—") > 30
    assert "None" not in re.sub(r"<[^>]+>", "", html)


def test_cross_session_is_flagged_and_computes_no_speedup(store: Store, tmp_path: Path) -> None:
    a = build(store, make_session(store))
    b = build(store, make_session(store, spec_rate=60.0))
    html = render_cross(a, b, tmp_path / "x").read_text()
    assert CROSS_BANNER in html and "17.97" not in html  # no anecdote in the product (issue 30)
    assert "DIFFERENT MODELS" not in html  # the same model on both sides
    assert "Not computed" in html and "CROSS-SESSION</span>" not in html
    assert (tmp_path / "x" / f"s{a.session.id}" / "index.html").is_file()
    flagged = render_cross(a, b, tmp_path / "y", allow_cross_session=True).read_text()
    rows = flagged[flagged.index("Speedup across sessions"):flagged.index("Probes × arms")]
    assert rows.count("<tr>") == 1 + 4  # header + mtp1, mtp2 of each session over the other's base
    assert rows.count('<span class="flag">CROSS-SESSION') == 4 * 5


def test_cross_session_speedups_take_the_other_sessions_base_of_the_same_engine(store: Store) -> None:
    """A spec arm's speedup across sessions is over the other session's base of its own engine, or none."""
    from observatory.report.html import cross_speedups

    a = build(store, make_session(store))
    b = build(store, make_session(store, spec_rate=60.0))
    assert len(cross_speedups(a, b)) == 4
    llama = {**b.arms[0].launch, "engine": "llama.cpp"}
    b2 = views.arm(b, 0, launch=llama, engine="llama.cpp")  # b's only base runs llama.cpp: no base for a's vLLM arms
    got = cross_speedups(a, b2)
    assert [(r["arm_session"], r["base_session"]) for r in got] == [(b.session.id, a.session.id)] * 2
    b3 = views.arm(b2, 3, launch={**b.arms[3].launch, "engine": "llama.cpp"},
                   engine="llama.cpp")  # a llama.cpp spec arm in b
    assert not any(r["arm"] == b.arms[3].name for r in cross_speedups(a, b3))  # a has no llama.cpp base


def test_report_command_writes_a_directory(store: Store, tmp_path: Path) -> None:
    sid = make_session(store)
    out = tmp_path / "out"
    db = str(tmp_path / "runs.db")
    result = CliRunner().invoke(report_cli(), ["report", str(sid), "--out", str(out), "--db", db],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {out / 'index.html'}\n"
    assert (out / "results" / "0-0.html").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--vs", "1"], "is the report's own session"), (["--allow-cross-session"], "only applies with --vs"),
     (["--vs", "99"], "No session 99")],
    ids=["vs-itself", "allow-without-vs", "vs-missing"],
)
def test_report_command_errors(store: Store, tmp_path: Path, args: list[str], message: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OBSERVATORY_RAISE_ERRORS", raising=False)
    make_session(store)
    result = CliRunner().invoke(report_cli(), ["report", "1", "--out", str(tmp_path / "o"),
                                         "--db", str(tmp_path / "runs.db"), *args])
    assert result.exit_code == 3 and message in result.output, result.output


@pytest.mark.parametrize("name", ["report", "history"])
def test_commands_document_themselves(name: str) -> None:
    cmd = report_cli().commands[name]
    assert cmd.help and "\b" in cmd.help
    assert CliRunner().invoke(report_cli(), [name, "--help"]).exit_code == 0


def test_reasoning_is_shown_escaped_on_the_result_page(data: SessionView, tmp_path: Path) -> None:
    """Issue item 14: the reasoning a reasoning parser split off is shown on the result page, escaped."""
    d = views.result(data, 3, "count", reasoning="thinking " + HOSTILE)
    render_session(d, tmp_path / "r")
    page = (tmp_path / "r" / "results" / "3-0.html").read_text()
    assert "reasoning (thinking" in page and "thinking " + HOSTILE_ESCAPED in page
    assert HOSTILE not in page


def test_degeneracy_window_scores_on_the_result_page(data: SessionView, tmp_path: Path) -> None:
    """Issue item 18: the report shows the degeneracy score per window of a long output."""
    r = next(r for r in data.arms[3].results if r.probe == "poem-zh")
    deg = r.verdicts["degeneracy"]
    d = views.result(data, 3, "poem-zh", verdicts={**r.verdicts, "degeneracy": replace(deg, details={
        **(deg.details or {}), "windows": [[0, 0.81], [100, 0.12]], "window_chars": 500, "window_stride": 100,
        "worst_window": [100, 600], "tail_score": 0.12})})
    render_session(d, tmp_path / "r")
    page = next(p for p in (tmp_path / "r" / "results").glob("3-*.html") if "poem-zh" in p.read_text())
    html = page.read_text()
    assert "Degeneracy per window" in html and '<span class="bad" title="characters 100+">0.12</span>' in html


def test_new_figures_are_shown(data: SessionView, tmp_path: Path) -> None:
    """Issue items 7, 11, 12, 15: bursty speed, per-level figures, cross-session S and performance checks."""
    fig = data.arms[2].figures
    d = views.figures(data, 2, speed={**(fig.speed or {}), "bursty": {
        "share": 0.93, "tokens": 400, "bunched": 372, "allowed_per_chunk": 2, "bursty": True}},
        vs_base={**(fig.vs_base or {}), "cross_session": "ran apart from the other arms (resumed?): host a vs b on base"})
    html = render_session(d, tmp_path / "r").read_text()
    assert "BURSTY" in html and "93.0% of 400 tokens arrived bunched" in html
    assert "Per concurrency level" in html and "S at this level" in html
    assert "CROSS-SESSION" in html and "host a vs b on base" in html
    assert "Performance checks" in html and "acceptance_floor" in html and "stream_tau" in html
    assert "cross-check (1 + α)" not in html  # the k = 1 identity is gone (issue item 9)
