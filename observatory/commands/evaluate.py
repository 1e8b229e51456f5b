"""Judge a stored session, then derive its figures and summaries: the store -> judge step in one call."""

from __future__ import annotations

from observatory.channels import judge_channel
from observatory.judge.apply_gates import judge_session
from observatory.judge.figures import compute_figures
from observatory.report.summarize import write_summaries
from observatory.store.session_store import Store


def evaluate(store: Store, session_id: int) -> int:
    """Re-judge every result, recompute every arm's figures and its history summary; returns the verdict count."""
    rows = judge_session(store, session_id, channels=judge_channel)
    compute_figures(store, session_id)
    write_summaries(store, session_id)
    return len(rows)
