"""A gate's ``@offline`` adapter over JSONL outputs: `check_lines` judges each line, `calibrate_degeneracy` scores
two files with the degeneracy gate (what `observatory gates check` and `observatory calibrate degeneracy` run).

Every line is read bounded (its length, its nesting) and a bad one is an error naming its source and number,
before anything is judged; blank lines are skipped (but counted).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import Gate, GateRegistry, default_registry
from observatory.model.safe_read import MAX_DEPTH, MAX_FILE_BYTES, too_deep

PERCENTILES = (10, 25, 50, 75, 90)


def _json_lines(lines: Iterable[str], source: str) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; errors name SOURCE and the line."""
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            if len(line) > MAX_FILE_BYTES:
                raise ObservatoryError(f"{source} line {number}: over {MAX_FILE_BYTES} characters")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ObservatoryError(f"{source} line {number}: not valid JSON: {e}") from None
            except RecursionError:
                raise ObservatoryError(f"{source} line {number}: nested too deeply (at most {MAX_DEPTH} "
                                       "levels)") from None
            if too_deep(obj):
                raise ObservatoryError(f"{source} line {number}: nested too deeply (at most {MAX_DEPTH} levels)")
            if not isinstance(obj, dict):
                raise ObservatoryError(
                    f"{source} line {number}: expected a JSON object, got {type(obj).__name__}"
                )
            yield number, obj
    except UnicodeDecodeError as e:
        raise ObservatoryError(f"{source}: not UTF-8 text ({e})") from None


def check_lines(g: Gate, lines: Iterable[str], source: str) -> list[dict[str, Any]]:
    """G's offline verdict for every JSON line of LINES, in order."""
    if g.offline is None:
        raise ObservatoryError(
            f"Gate {g.name!r} ({g.path}) has no @offline adapter to run on JSONL."
        )
    verdicts = []
    for number, obj in _json_lines(lines, source):
        try:
            verdicts.append(g.offline(obj))
        except ObservatoryError as e:
            raise ObservatoryError(f"{source} line {number}: {e}") from None
    return verdicts


def distribution(scores: list[float]) -> dict[str, Any]:
    """n, min, percentiles and max of SCORES (at least one)."""
    import numpy as np  # imported here: `observatory gates list` must start fast

    pct = np.percentile(scores, PERCENTILES)
    return {
        "n": len(scores),
        "min": min(scores),
        **{f"p{q}": round(float(v), 4) for q, v in zip(PERCENTILES, pct)},
        "max": max(scores),
    }


def _score_file(adapter: Any, path: Path) -> tuple[list[float], dict[str, int], float]:
    """(scores, unscored counts, the gate's threshold) for one JSONL file of outputs."""
    scores: list[float] = []
    unscored = {"short": 0, "empty": 0}
    threshold = 0.0
    with path.open(encoding="utf-8") as f:
        for number, obj in _json_lines(f, str(path)):
            if not isinstance(obj.get("text"), str):
                raise ObservatoryError(f'{path} line {number}: expected {{"text": "<output>"}}')
            out = adapter(obj)
            if out.get("score") is not None:
                scores.append(out["score"])
                threshold = out["threshold"]
            else:
                unscored["short" if out.get("short") else "empty"] += 1
    if not scores:
        raise ObservatoryError(
            f"{path}: no output long enough to score; "
            "add outputs of 20 or more non-whitespace characters."
        )
    return scores, unscored, threshold


def calibrate_degeneracy(
    healthy: Path, degenerate: Path, registry: GateRegistry | None = None
) -> dict[str, Any]:
    """Score both files with the degeneracy gate; their distributions and separation."""
    g = (registry or default_registry()).get("degeneracy")
    h_scores, h_unscored, threshold = _score_file(g.offline, healthy)
    d_scores, d_unscored, _ = _score_file(g.offline, degenerate)
    h_min, d_max = min(h_scores), max(d_scores)
    return {
        "threshold": threshold,
        "healthy": {**distribution(h_scores), "unscored": h_unscored},
        "degenerate": {**distribution(d_scores), "unscored": d_unscored},
        "ratio": h_min / d_max if d_max > 0 else None,
        "separates": d_max < threshold <= h_min,
        "healthy_below": sum(s < threshold for s in h_scores),
        "degenerate_at_or_above": sum(s >= threshold for s in d_scores),
    }
