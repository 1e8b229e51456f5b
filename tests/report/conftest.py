"""Tests of the report floor (observatory/report/): the HTML report and its failures-first layout (also in a
headless Chromium), history and per-arm summaries, what a terminal shows at the end, JUnit and OpenMetrics for
CI, report directories. Sessions are made through the real store and judged by the real `evaluate`
(tests/support/judged_sessions.py); a view a session cannot show is a changed copy (tests/support/views.py).
"""

from __future__ import annotations

import pytest

from observatory.model.read_model import SessionView
from observatory.report.data import build
from observatory.store.session_store import Store
from tests.support.judged_sessions import make_session


@pytest.fixture
def data(store: Store) -> SessionView:
    """The default session as build() returns it (mtp2 / count a hard divergence: FAIL; mtp1 / poem-zh a
    near-tie: WARN)."""
    return build(store, make_session(store))
