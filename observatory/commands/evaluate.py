"""Judge a stored session, then derive its figures and summaries: the store -> judge step in one call."""

from __future__ import annotations

from observatory.channels import judge_channel
from observatory.judge.apply_gates import judge_session
from observatory.judge.figures import compute_figures
from observatory.judge.ledger_match import apply_ledger
from observatory.model.ledger import Ledger
from observatory.report.summarize import write_summaries
from observatory.store.session_store import Store


def evaluate(store: Store, session_id: int, ledger: Ledger | None = None) -> int:
    """Re-judge every result, recompute every arm's figures, mark what the known-findings ledger covers KNOWN
    (LEDGER, else the one stored with the session, else none) and write its history summary; returns the
    verdict count."""
    rows = judge_session(store, session_id, channels=judge_channel)
    compute_figures(store, session_id)
    apply_ledger(store, session_id, ledger)
    write_summaries(store, session_id)
    return len(rows)
