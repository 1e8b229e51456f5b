"""Triages in the database: one row per triage, one per run, linked to the session.

Every run is written as soon as it is judged, so an interrupted triage keeps
what it measured and ``--resume`` goes on from there. `summaries` is what
`show --json` and the HTML report read.
"""

from __future__ import annotations

from typing import Any

from observatory.store import triages
from observatory.store.clock import utcnow
from observatory.store.db import TriageRow
from observatory.store.session_store import Store, storable
from observatory.triage.search import TriageOutcome, TriageRun, change_key


def start(store: Store, session_id: int, arm: str, probes: list[dict[str, Any]], options: dict[str, Any]) -> int:
    """Store a new running triage; return its id."""
    row = store.add(TriageRow(session_id=session_id, arm=arm, status="running", probes=probes, options=options,
                              outcome={}))
    return int(row.id)


def resumable(store: Store, session_id: int, arm: str) -> TriageRow | None:
    """The latest unfinished triage of ARM in the session (what --resume continues), if any."""
    return triages.latest_unfinished(store, session_id, arm)


def runs(store: Store, triage_id: int) -> list[TriageRun]:
    """A triage's runs, in the order they were made."""
    return [TriageRun(dict(r.change or {}), r.verdict, r.first_divergence, r.reason, dict(r.details or {}),
                      r.log_path, r.duration_s) for r in triages.run_rows(store, triage_id)]


def done_runs(store: Store, triage_id: int) -> dict[str, TriageRun]:
    """A triage's runs by change key (the cache --resume reuses)."""
    return {change_key(r.change): r for r in runs(store, triage_id)}


def add_run(store: Store, triage_id: int, run: TriageRun) -> None:
    """Store one judged run."""
    triages.add_run_row(store, triage_id, change=run.change, verdict=run.verdict,
                        first_divergence=run.first_divergence, reason=storable(run.reason),
                        details=storable(run.details), log_path=run.log_path, duration_s=run.duration_s)


def finish(store: Store, triage_id: int, status: str, outcome: TriageOutcome | None, reason: str | None = None) -> None:
    """Mark the triage finished with STATUS (complete | interrupted | failed) and its outcome."""
    values: dict[str, Any] = {"status": status, "reason": reason, "finished_at": utcnow()}
    if outcome is not None:
        values["outcome"] = outcome.to_dict()
    store.update(TriageRow, triage_id, **values)


def as_json(row: TriageRow, made: list[TriageRun]) -> dict[str, Any]:
    """The `triage --json` object of one stored triage."""
    o = row.outcome or {}
    return {
        "triage": row.id, "session": row.session_id, "arm": row.arm, "status": row.status, "reason": row.reason,
        "probes": sorted({p["probe"] for p in row.probes or []}),
        "failures": row.probes or [],
        "runs": [r.to_json() for r in made],
        "flips": o.get("flips", []), "keeps": o.get("keeps", []), "minimal": o.get("minimal"),
        "minimal_proven": o.get("minimal_proven"), "reproduced": o.get("reproduced"),
        "not_tried": o.get("not_tried", []), "not_applicable": (row.options or {}).get("not_applicable", {}),
        "summary": o.get("summary", ""),
    }


def summaries(store: Store, session_id: int) -> list[dict[str, Any]]:
    """Every triage of a session, oldest first, as `triage --json` prints it (for show --json and the report)."""
    return [as_json(r, runs(store, r.id)) for r in triages.triage_rows(store, session_id)]


def get(store: Store, triage_id: int) -> dict[str, Any]:
    """One stored triage as `triage --json` prints it."""
    return as_json(triages.triage_row(store, triage_id), runs(store, triage_id))
