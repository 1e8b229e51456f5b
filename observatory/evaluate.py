"""Judge a stored session, then derive its figures: the store -> judge step in one call."""

from __future__ import annotations

from typing import Any

from observatory.figures import compute_figures
from observatory.judge import judge_session


def evaluate(store: Any, session_id: int) -> int:
    """Re-judge every result and recompute every arm's figures; returns the verdict count."""
    rows = judge_session(store, session_id)
    compute_figures(store, session_id)
    return len(rows)
