"""What the engine-condition channels share (memory_pressure, lifecycle, long_prompts; docs/channels.md).

They look at the engine's own conditions rather than at one more kind of
request: a KV cache small enough to preempt, a sleep/wake or cache-reset
cycle, prompts up to the context limit. Each keeps on the arm what its judge
needs beyond the stored results (`LiveArm.note`: an engine counter, the
endpoints found), read back here; a condition the engine never reached is
"not exercised" by name (SKIP), never a PASS.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import httpx

from observatory.channels.view import ChannelView
from observatory.client.send import EngineClient
from observatory.judge.stats import Z_P001
from observatory.model.vocabulary import SKIP
from observatory.store.stored import StoredArm, StoredResult, Verdict

NOT_EXERCISED = "not exercised"
Z_DROP = Z_P001  # two-sided p < 0.001 for one comparison (soak's rule, docs/channels.md section soak)


def facts(arm: StoredArm, channel: str) -> dict[str, Any]:
    """What CHANNEL noted on ARM while it ran (`LiveArm.note`), {} if nothing."""
    got = ((arm.launch or {}).get("channel_facts") or {}).get(channel)
    return dict(got) if isinstance(got, dict) else {}


def sibling_problem(arm: StoredArm, channel: str) -> str | None:
    """Why CHANNEL's second engine of ARM did not run (not launched, or died), or None."""
    sib = facts(arm, channel).get("sibling")
    if not isinstance(sib, dict):
        return None
    if not sib.get("launched"):
        return f"the engine with the condition was not launched ({sib.get('reason')})"
    if sib.get("ended"):
        return f"the engine with the condition ended early ({sib.get('ended')})"
    return None


def not_exercised(view: ChannelView, arm: StoredArm, why: str, details: dict[str, Any] | None = None,
                  part: str | None = None) -> Verdict:
    """The verdict of a condition the engine never reached: SKIP, its reason starting "not exercised"."""
    return view.verdict(arm, SKIP, f"{NOT_EXERCISED}: {why}", details, part=part)


def metrics_text(client: EngineClient, timeout_s: float = 30.0) -> str | None:
    """The server's /metrics text, or None when it does not answer one."""
    try:
        r = client.fetch("/metrics", timeout_s)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def acceptance(r: StoredResult) -> tuple[int, int] | None:
    """(accepted, drafted) draft tokens of one request's counter delta; None when not reported or no drafts."""
    cd = r.counters_delta or {}
    acc, drafted = cd.get("accepted"), cd.get("draft_tokens")
    if not isinstance(acc, int) or not isinstance(drafted, int) or drafted <= 0:
        return None
    return acc, drafted


def decode_rate(r: StoredResult) -> float | None:
    """Tokens per second after the first token (the decode phase), or None when not measurable."""
    n = len(r.token_ids or [])
    if not r.ok or n < 2 or r.duration_ms is None or r.ttft_ms is None or r.duration_ms <= r.ttft_ms:
        return None
    return (n - 1) / ((r.duration_ms - r.ttft_ms) / 1000.0)


def request_rate(r: StoredResult) -> float | None:
    """Generated tokens per second over the whole request (first token included), or None.

    Steadier than `decode_rate` on short answers: a stream whose tokens arrive in a few chunks
    leaves almost no time after its first token, and the decode rate of 30 tokens then swings
    by orders of magnitude between two identical requests (seen on the loaded CPU engine)."""
    n = len(r.token_ids or [])
    if not r.ok or n < 1 or r.duration_ms is None or r.duration_ms <= 0:
        return None
    return n / (r.duration_ms / 1000.0)


def log_ratio(a: float | None, b: float | None) -> float | None:
    """ln(a / b), None unless both are positive."""
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return math.log(a / b)


def median(values: list[float]) -> float | None:
    """The median, None for no values."""
    return statistics.median(values) if values else None
