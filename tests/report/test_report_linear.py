"""The report's per-result work is done once per session, not once per result (issue "A fast instrument")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.report import html as report
from observatory.report.data import build
from observatory.store.session_store import Store
from tests.support.judged_sessions import make_session


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    calls: list[Any] = []
    real = getattr(report, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(report, name, counted)
    return calls


def test_render_session_indexes_the_divergences_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue "A fast instrument" item 4: render_session called diff_views once per result, each call
    walking every result (392 ms at 1,280 results)."""
    store = Store(str(tmp_path / "t.db"))
    data = build(store, make_session(store))
    whole = report.diff_views(data)
    calls = _spy(monkeypatch, "diffs_by_result")
    report.render_session(data, tmp_path / "r")
    results = sum(len(a.results) for a in data.arms)
    assert results > 4 and len(calls) == 1  # one index for the banner's links, the index page and the detail pages
    # what the detail pages get is what the session list holds, result by result
    per_result = [d for ai, a in enumerate(data.arms) for pi, _ in enumerate(data.probes)
                  for d in report.diff_views(data, (ai, pi))]
    # the session list is the same divergences, failures first (report.sorted_diffs)
    assert report.sorted_diffs({(0, i): [d] for i, d in enumerate(per_result)}) == whole and whole


def test_render_cross_builds_each_matrix_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue "A fast instrument" item 4: render_cross recomputed matrix() per probe (19 s at 320 probes)."""
    store = Store(str(tmp_path / "t.db"))
    a, b = build(store, make_session(store)), build(store, make_session(store))
    calls = _spy(monkeypatch, "matrix")
    page = report.render_cross(a, b, tmp_path / "x").read_text()
    # one per side for the comparison table, plus each side's own index page
    assert len(calls) == 4 and len(a.probes) > 2
    assert all(p.name in page for p in a.probes)
