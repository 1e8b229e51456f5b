"""What users see first (issue 30 items 2 and 3, issue 32 item 7): failures first, each one click from the top.

The banner lists FAIL before WARN and links each reason to its evidence on the
index page; the linked element holds both continuations; a FAIL row past any
cap is shown; PASS rows alone are capped; the drafts/accepted counts are the
terminal's, labelled with their pass; `--vs` of two models says so and
computes no speedup across them. Sessions are the real store's (test_report's
`make_session`); channel verdicts a session cannot be made to show on demand
(a FAIL at row 46 of 60) are set on a real `build()` view (tests/support/views.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console

from observatory.model.read_model import ChannelArm, ChannelSummary, SessionView, VerdictView
from observatory.report.channel_blocks import PASS_ROWS_SHOWN
from observatory.report.data import build, counters
from observatory.report.html import render_cross, render_session
from observatory.report.terminal import print_summary
from observatory.store.session_store import Store
from tests.support import views
from tests.support.judged_sessions import make_session


class _Elements(HTMLParser):
    """Every element with an id: its full inner HTML (nested elements included)."""

    VOID: ClassVar[set[str]] = {"br", "img", "input", "meta", "hr", "link", "circle", "rect", "line", "polyline", "polygon"}

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        self.html = html
        self.open: list[tuple[str, str | None, int]] = []
        self.ids: dict[str, str] = {}
        self.lines = [0]
        for line in html.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.feed(html)

    def _pos(self) -> int:
        line, col = self.getpos()
        return self.lines[line - 1] + col

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        start = self._pos() + len(self.get_starttag_text() or "")
        self.open.append((tag, dict(attrs).get("id"), start))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            t, ident, start = self.open.pop()
            if ident:
                self.ids[ident] = self.html[start:self._pos()]
            if t == tag:
                break


def _banner(html: str) -> list[tuple[str, str | None, str]]:
    """(level, href, text) of each banner reason, in order (the FAIL/INVALID list, the WARN one, then the KNOWN and
    NOTE blocks), up to the banner's own closing tag."""
    banner = html[html.index('id="verdict"'):]
    ul = banner[:banner.index("\n</div>")]
    out = []
    for li in re.findall(r"<li class=\"r-(\w+)\">(.*?)</li>", ul, re.S):
        href = re.search(r'<a href="([^"]+)">', li[1])
        out.append((li[0], href.group(1) if href else None, re.sub(r"<[^>]+>", "", li[1]).strip()))
    return out


def test_banner_lists_fail_first_and_its_link_leads_to_both_continuations(data: SessionView, tmp_path: Path) -> None:
    html = render_session(data, tmp_path / "r").read_text()
    reasons = _banner(html)
    levels = [lv for lv, _, _ in reasons]
    later = "WARN" if "WARN" in levels else "NOTE"  # a near-tie within its control's rate is a NOTE (issue 46)
    assert "FAIL" in levels and later in levels
    assert levels.index(later) > max(i for i, lv in enumerate(levels) if lv == "FAIL")  # FAIL before WARN/NOTE
    first = reasons[0]
    assert first[0] == "FAIL" and first[1]  # the first reason is a FAIL with a link that resolves
    page, _, frag = first[1].partition("#")
    target = (tmp_path / "r" / page).read_text() if page else html
    assert frag in _Elements(target).ids
    level, href, _ = next(r for r in reasons if "mtp2 / count: token_diff:" in r[2])
    assert level == "FAIL" and href == "#diff-3-0-token_diff"
    card = _Elements(html).ids[href[1:]]  # the anchor exists on the page, and holds the evidence
    assert '<span class="tok div"> 3</span>' in card and '<span class="tok div"> 5</span>' in card  # base, spec
    assert "margin <b>3.000</b>" in card
    details = next(r for r in data.arms[3].results if r.probe == "count").verdicts["token_diff"].details or {}
    assert f"(id <b>{details['base_token_id']}</b> vs <b>{details['spec_token_id']}</b>)" in card
    assert all(h for lv, h, _ in reasons if lv in ("FAIL", "WARN"))  # every FAIL and WARN is a link
    assert html.index('id="verdict"') < html.index('id="facts"')  # the banner comes first


def _with_channel(data: SessionView, ai: int, rows: list[dict[str, Any]], verdict: str) -> SessionView:
    v = VerdictView(verdict=verdict, reason=f"{sum(r['verdict'] == 'FAIL' for r in rows)} of {len(rows)} requests "
                    "differ from base", details={"table": rows}, gate_version="1")
    d = views.arm(data, ai, channel_verdicts={"mixed_batch": v})
    arms = tuple(ChannelArm(arm=a.name, role=a.role, status=a.status, verdicts=dict(a.channel_verdicts))
                 for a in d.arms)
    return replace(d, channels=(ChannelSummary(name="mixed_batch", title="Mixed concurrent batches",
                                               catches="rows leaking into each other", probes=len(rows), arms=arms),))


def test_a_channel_fail_past_the_cap_is_shown_first_and_linked(data: SessionView, tmp_path: Path) -> None:
    """Issue 30: tables showed their first 40 rows, so a FAIL at row 46 was not shown at all."""
    rows: list[dict[str, Any]] = [{"index": i, "verdict": "PASS", "kind": "identical"} for i in range(60)]
    rows[45] = {"index": 45, "verdict": "FAIL", "kind": "diverged", "position": 2, "margin": 4.0, "from_token": 2,
                "base": [" b1", " b2"], "base_ids": [11, 12], "here": [" h1"], "here_ids": [21]}
    rows[50] = {"index": 50, "verdict": "WARN", "kind": "near_tie", "position": 1, "margin": 0.1}
    d = _with_channel(data, 3, rows, "FAIL")
    html = render_session(d, tmp_path / "r").read_text()
    links = [h for lv, h, t in _banner(html) if "channel mixed_batch" in t]
    assert links == ["#ch-3-mixed_batch"]
    block = _Elements(html).ids["ch-3-mixed_batch"]
    assert '<span class="tok div"> b1</span>' in block and '<span class="tok div"> h1</span>' in block
    assert ">11 12<" in block and ">21<" in block
    body = re.findall(r"<tr class=\"([^\"]*)\"><td>(\d+)</td>", block)
    assert [i for _, i in body][:2] == ["45", "50"]  # FAIL, then WARN, then the PASS rows
    assert len(body) == 2 + PASS_ROWS_SHOWN and body[0][0] == "bad"
    assert f"{58 - PASS_ROWS_SHOWN} more PASS row(s) of 60 not shown" in block
    # the nav reaches the channels; the failing channel is listed before a passing one would be
    assert '<a href="#channels">channels</a>' in html


def test_an_all_pass_channel_table_hides_only_pass_rows(data: SessionView, tmp_path: Path) -> None:
    rows = [{"index": i, "verdict": "PASS", "kind": "identical"} for i in range(50)]
    html = render_session(_with_channel(data, 3, rows, "PASS"), tmp_path / "r").read_text()
    block = _Elements(html).ids["ch-3-mixed_batch"]
    assert "<details><summary>50 row(s), none failing</summary>" in block
    assert f"{50 - PASS_ROWS_SHOWN} more PASS row(s) of 50 not shown" in block


def test_the_failures_only_view_works_without_script(data: SessionView, tmp_path: Path) -> None:
    html = render_session(data, tmp_path / "r").read_text()
    assert "<script" not in html
    toggle = html.index('<input type="checkbox" id="failures-only"')
    assert toggle < html.index('<div class="content">') < html.index('id="matrix"')
    assert "#failures-only:checked ~ .content .pass-row" in html
    matrix = html[html.index('id="matrix"'):html.index('id="diffs"')]
    rows = re.findall(r"<tr( class=\"pass-row\")?>\s*<th><div>([^<]+)</div>", matrix)
    assert rows[0] == ("", "count")  # a failing probe first, not marked to hide
    assert rows[-1][0] and any(mark for mark, _ in rows)  # passing probes last, hidden by the toggle


def test_arms_table_counts_are_the_terminals_and_every_pass_is_labelled(data: SessionView, tmp_path: Path) -> None:
    """Issue 30 item 3: the terminal said drafts 111 / accepted 220, the report (another pass) 666 / 1320."""
    acc = dict(data.arms[3].figures.acceptance or {})
    stream = acc["from"]["stream"]
    # the timed runs moved the counters too (make_session's do not): the arm's figures count both passes
    timed = {"drafts": 500, "draft_tokens": 1000, "accepted": 900, "accepted_per_pos": [480, 420]}
    acc.update({k: stream[k] + timed[k] for k in ("drafts", "draft_tokens", "accepted")},
               **{"from": {"stream": stream, "timed": timed}})
    data = views.figures(data, 3, acceptance=acc)
    # what the runner stores as the arm's counters: the streamed probe pass's total (observatory.session.measure)
    data = views.arm(data, 3, counters=counters(stream))
    html = render_session(data, tmp_path / "r").read_text()
    mtp2 = data.arms[3]
    assert (acc["drafts"], acc["accepted"]) != (mtp2.counters.drafts, mtp2.counters.accepted)  # two scopes exist
    row = _Elements(html).ids["arm-3"]
    assert re.findall(r'<td class="n">(\d+)</td>', row) == [str(mtp2.counters.drafts), str(mtp2.counters.accepted)]
    console = Console(record=True, width=200)
    print_summary(data, console)
    text = console.export_text()
    line = next(x for x in text.splitlines() if x.strip("│ ").startswith("mtp2"))
    assert f" {mtp2.counters.drafts} " in line and f" {mtp2.counters.accepted} " in line
    # ... under the report's labels, and alpha and tau say which passes they count (the report's "every pass")
    head = "".join(text.split("Arms", 1)[1].splitlines()[:6])
    assert all(w in head for w in ("drafts", "(steps,", "accepted", "(tokens,", "probe pass")), head
    assert re.search(r"mtp2: .*alpha \d\.\d{3} · tau \d\.\d{2} \(all passes\)", text), text
    assert "steps, probe pass" in html and "tokens, probe pass" in html
    assert "streamed probes (correctness pass)" in html and "timed runs (speed pass)" in html
    assert f'<th>all passes (α and τ)</th><td class="n">{acc["drafts"]}</td>' in html


def test_speedup_chart_has_the_interval_and_the_aa_band(store: Store, tmp_path: Path) -> None:
    d = build(store, make_session(store))
    spread = next(a.figures.noise_floor for a in d.arms if a.figures.noise_floor)["throughput_spread"]
    html = render_session(d, tmp_path / "a").read_text()
    chart = html[html.index('aria-label="S per arm'):]
    chart = chart[:chart.index("</svg>")]
    assert f"A/A noise {1 - spread:.3f}–{1 + spread:.3f}" in chart and "95% interval" in chart and chart.count("<circle") == 2
    bare = render_session(build(store, make_session(store, arms=("base", "mtp1", "mtp2"))), tmp_path / "b")
    chart = bare.read_text()[bare.read_text().index('aria-label="S per arm'):]
    assert "no A/A copy: noise unmeasured" in chart[:chart.index("</svg>")]
    assert "Acceptance per draft position, per arm" in html


def test_vs_of_two_models_names_them_and_compares_no_speed(store: Store, tmp_path: Path) -> None:
    """Issue 32 item 7: `report --vs` across models said nothing about it."""
    a = build(store, make_session(store))
    b = build(store, make_session(store, model="other/llama-8b"))
    page = render_cross(a, b, tmp_path / "x", allow_cross_session=True).read_text()
    banner = page[page.index('id="different-models"'):]
    banner = banner[:banner.index("</div>\n</div>")]
    assert "DIFFERENT MODELS" in banner and "toy/mtp-model" in banner and "other/llama-8b" in banner
    assert page.index("DIFFERENT MODELS") < page.index("<h2>Sessions</h2>")
    speed = page[page.index("Speedup across sessions"):page.index("Probes × arms")]
    assert "served different models" in speed and "CROSS-SESSION</span>" not in speed
    assert "17.97" not in page
    same = render_cross(a, build(store, make_session(store)), tmp_path / "y", allow_cross_session=True).read_text()
    assert "DIFFERENT MODELS" not in same and "CROSS-SESSION</span>" in same  # the control: one model, ratios shown


def test_reasons_about_the_whole_session_link_to_where_it_shows(data: SessionView, tmp_path: Path) -> None:
    d = views.session(data, status="interrupted", reason="killed by the CI runner")
    html = render_session(d, tmp_path / "r").read_text()
    reasons = _banner(html)
    got = next(r for r in reasons if r[2].startswith("INVALID session interrupted"))
    assert got[1] == "#facts" and "killed by the CI runner" in html[html.index('id="facts"'):html.index('id="arms"')]
    levels = [lv for lv, _, _ in reasons]
    assert levels == sorted(levels, key=["FAIL", "INVALID", "WARN", "NOTE"].index)


def test_a_divergence_whose_texts_agree_says_the_ids_differ(data: SessionView, tmp_path: Path) -> None:
    """Never two identical rows without a word: the same text as other token ids is named as such."""
    r = next(r for r in data.arms[3].results if r.probe == "count")
    v = r.verdicts["token_diff"]
    same = {**(v.details or {}), "base_continuation": [" 3", ","], "spec_continuation": [" 3", ","]}
    d = views.result(data, 3, "count", verdicts={**r.verdicts, "token_diff": replace(v, details=same)})
    card = _Elements(render_session(d, tmp_path / "r").read_text()).ids["diff-3-0-token_diff"]
    assert "the text agrees from here on; the token ids differ" in card
    plain = _Elements(render_session(data, tmp_path / "p").read_text()).ids["diff-3-0-token_diff"]
    assert "the text agrees" not in plain  # the control: different texts need no such note
