"""The prefix cache per arm: a prompt-length sweep sent twice, cold then warm.

Field bugs (docs/channels.md, "prefix_cache"): speculation that loses
prefix-cache hits only at some prompt lengths (the hash unit or block
alignment of the prompt, several attention groups: hits 0% with spec, 72.7%
without), a drafter whose cached state is not restored on a hit (acceptance
lost on warm requests), and a cached prefix that changes the answer. The
answers stay right in the first two: no diff sees them.

Requests: for each prompt length L of the sweep (`lengths`: both sides of
the first block boundary, then every length from two blocks to three blocks
and a few tokens, so every alignment of L to the block is sent where base
hits two blocks), a prompt of exactly L token ids (the server's own
``/tokenize``: a head naming L, so no two lengths share a block, then
filler), greedy, ``MAX_TOKENS`` tokens with EOS ignored, sent twice at once
one after the other: ``cold`` (nothing cached) and ``warm`` (the same ids).
The block size is the engine's own (``vllm:cache_config_info``; 16 when it
does not say). Cached tokens come from the answer
(``usage.prompt_tokens_details.cached_tokens``: the session launches every
arm with the engine's prompt-token details on, `Channel.engine_features`),
else from the engine's prefix-cache hit counter around the request. On a
speculating arm the spec counters are read around each request.

Verdicts:
- ``prefix_cache``: each length's warm cached tokens against base's. An arm
  that keeps fewer than base by more than its engine recomputes by design
  (the adapter's `spec_cache_blocks_recomputed`: vLLM recomputes the last
  matched block for EAGLE/MTP drafters) FAILs with the lengths where it
  happens; a deficit of exactly that design allowance is a NOTE with the
  lengths and the time it costs (docs/engines.md); base's cold requests
  that hit, or a base that never hits (prefix caching off), are named.
- ``prefix_cache:outputs``: every request diffed against base's cold request
  of the same length (pairs.py): a warm answer that differs where base's
  warm answer does not is a cached prefix changing the output.
- ``prefix_cache:acceptance`` (speculating arms): accepted/drafted over the
  warm requests against the cold ones, two-proportion z; a drop beyond
  ``Z_DROP`` standard errors and ``MIN_DROP`` is a WARN.

The time to first token, warm against cold and against base's warm, is
reported with the cache verdicts (not judged: on the field model one
block's prefill is within the request-to-request noise, docs/channels.md).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.engine_conditions import Z_DROP, acceptance, facts, metrics_text
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base, same_tokens
from observatory.channels.soak import z_two_proportions
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.engines.adapter import recomputed_prefix_blocks
from observatory.engines.server_facts import reported_block_size, served_facts
from observatory.model.probes import Probe
from observatory.model.vocabulary import BASE, FAIL, INVALID, NOTE, PASS, SKIP, SPECULATING, UNJUDGED, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "prefix_cache"
MAX_TOKENS = 6
SAMPLING = {"ignore_eos": True}  # every request drafts as long as the others
ROUNDS = ("cold", "warm")
DEFAULT_BLOCK = 16  # when the engine does not say (CUDA vLLM's default)
LOW = 5  # lengths around the first block boundary: B - 1, B, B + 1, B + 2, B + B // 2
SWEEP = 136  # contiguous lengths from 2B - 2: every alignment to the block where base hits two blocks
MIN_DROP = 0.05  # acceptance drops smaller than this are not reported, however sure
FILLER = " The quick brown fox jumps over the lazy dog."
FEATURE = "prompt_tokens_details"  # what the arms must report (`Channel.engine_features`)


def lengths(block: int, max_len: int | None = None) -> list[int]:
    """The LOW + SWEEP prompt lengths for a KV-cache block of BLOCK tokens, each at most MAX_LEN (kept apart)."""
    low = [block - 1, block, block + 1, block + 2, block + block // 2]
    out = [max(1, n) for n in low] + list(range(2 * block - 2, 2 * block - 2 + SWEEP))
    if max_len is not None:
        out = [min(n, max_len) for n in out]
    return out


def plan(suite: list[Probe]) -> list[Probe]:
    """One probe per sweep position (its length is set at measure time from the engine's block size)."""
    return [Probe(name=f"{NAME}/{i:03d}", category=NAME, prompt="", max_tokens=MAX_TOKENS, channel=NAME,
                  sampling=dict(SAMPLING), meta={"index": i}) for i in range(LOW + SWEEP)]


def prompt_ids(head: list[int], filler: list[int], length: int) -> list[int]:
    """Exactly LENGTH ids: HEAD (which names the length, so no two lengths share a cache block), then filler."""
    if not filler:
        raise ValueError("the filler has no tokens")
    ids = head + filler * (length // len(filler) + 1)
    return ids[:length]


def block_size(served: dict[str, Any]) -> tuple[int, bool]:
    """(the KV-cache block size the server reports, whether it reported one)."""
    n = reported_block_size(served)
    return (DEFAULT_BLOCK, False) if n is None else (n, True)


def cached_in_answer(r: StoredResult | Response) -> int | None:
    """The cached prompt tokens the answer reports (``usage.prompt_tokens_details.cached_tokens``), or None."""
    details = (r.usage or {}).get("prompt_tokens_details")
    n = details.get("cached_tokens") if isinstance(details, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _hits(run: LiveArm) -> int | None:
    """The engine's prefix-cache hit counter (tokens, its adapter's `prefix_cache_hits`), None when it has none."""
    assert run.client is not None
    text = metrics_text(run.client)
    return run.client.adapter.prefix_cache_hits(text) if text else None


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each length cold then warm, one at a time; the cached tokens from the answer or the hit counter."""
    client = run.client
    assert client is not None
    served = served_facts(client)
    block, reported = block_size(served)
    limit = served.get("max_model_len")
    todo = lengths(block, limit - MAX_TOKENS - 1 if isinstance(limit, int) else None)
    filler = client.tokenize(FILLER)
    from_metrics: dict[str, int] = {}
    run.note(NAME, block_size=block, block_size_reported=reported, lengths=todo[:len(probes)])
    spec = run.arm.is_spec
    counters = settled(run) if spec else None
    answers_say: bool | None = None  # whether the answers carry cached_tokens (then /metrics is not read)
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, NAME, i, len(probes))
        n = todo[int(probe.meta["index"])]
        head = client.tokenize(f"Record {n}:")
        for rnd, phase in enumerate(ROUNDS):
            if not head or not filler:
                run.store_result(probe, Response(error="not sent: the server did not tokenize (/tokenize)",
                                                 error_kind="http"), NAME, repeat=rnd)
                continue
            sent = dataclasses.replace(probe, prompt=prompt_ids(head, filler, n), meta={**probe.meta, "length": n})
            hits = _hits(run) if answers_say is not True else None
            resp = client.run(sent, stream=True)
            delta = None
            if spec and counters is not None and resp.ok:
                now = settled(run)
                delta, counters = now - counters, now
            if resp.ok:
                answers_say = cached_in_answer(resp) is not None
            if resp.ok and not answers_say and hits is not None:
                after = _hits(run)
                if after is not None:
                    from_metrics[f"{n}/{phase}"] = after - hits
            run.store_result(probe, resp, NAME, delta, repeat=rnd)
            run.check_alive(resp)
            if not run.live:
                return
    if from_metrics:
        run.note(NAME, cached_from_metrics=from_metrics)


# -- judging ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Length:
    """One length's two requests on one arm."""

    length: int
    cold: StoredResult | None
    warm: StoredResult | None
    cold_cached: int | None
    warm_cached: int | None


def by_length(view: ChannelView, arm: StoredArm) -> dict[int, Length]:
    """The arm's requests by prompt length (the length the arm noted for each sweep position)."""
    f = facts(arm, NAME)
    todo = f.get("lengths") or []
    metrics = f.get("cached_from_metrics") or {}
    got: dict[int, dict[int, StoredResult]] = {}
    for r in view.results(arm):
        i = int(view.probe(r).meta["index"])
        if i < len(todo):
            got.setdefault(int(todo[i]), {})[r.repeat] = r
    def cached(r: StoredResult | None, key: str) -> int | None:
        if r is None or not r.ok:
            return None
        v = cached_in_answer(r)
        m = metrics.get(key)
        return v if v is not None else (m if isinstance(m, int) else None)

    return {n: Length(n, rs.get(0), rs.get(1), cached(rs.get(0), f"{n}/{ROUNDS[0]}"),
                      cached(rs.get(1), f"{n}/{ROUNDS[1]}")) for n, rs in sorted(got.items())}


def allowance(arm: StoredArm) -> tuple[int, str]:
    """(blocks the arm's engine recomputes of a matched prefix by design, why), from its adapter."""
    return recomputed_prefix_blocks(arm.engine, arm.launch)


def _ms(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _ttft(ls: dict[int, Length], phase: str) -> list[float]:
    return [x.ttft_ms for ln in ls.values() if (x := getattr(ln, phase)) is not None and x.ok
            and x.ttft_ms is not None]


def _cache_verdict(view: ChannelView, arm: StoredArm, base: dict[int, Length], block: int) -> Verdict:
    mine = by_length(view, arm)
    allowed, why = allowance(arm)
    rows: list[dict[str, Any]] = []
    lost: list[dict[str, Any]] = []
    design: list[dict[str, Any]] = []
    unmeasured = 0
    for n, b in base.items():
        m = mine.get(n)
        here = m.warm_cached if m is not None else None
        if b.warm_cached is None or here is None:
            unmeasured += 1
            continue
        deficit = b.warm_cached - here
        blocks = deficit / block
        row: dict[str, Any] = {"length": n, "base_cached": b.warm_cached, "cached": here, "deficit_tokens": deficit,
               "deficit_blocks": round(blocks, 2), "cold_cached": m.cold_cached if m else None}
        if deficit > 0 and blocks > allowed:
            row["kind"] = "hits lost"
            lost.append(row)
        elif deficit > 0:
            row["kind"] = "recomputed by design"
            design.append(row)
        else:
            row["kind"] = "same as base" if deficit == 0 else "more than base"
        rows.append(row)
    warm_here, warm_base = _ttft(mine, "warm"), _ttft(base, "warm")
    details: dict[str, Any] = {"table": [r for r in rows if r["kind"] != "same as base"] or rows[:5],
                               "lengths": len(rows), "block_size": block, "allowance_blocks": allowed,
                               "allowance_why": why, "unmeasured": unmeasured,
                               "warm_ttft_ms": _ms(warm_here), "cold_ttft_ms": _ms(_ttft(mine, "cold")),
                               "base_warm_ttft_ms": _ms(warm_base), "base_cold_ttft_ms": _ms(_ttft(base, "cold"))}
    if not rows:
        return view.verdict(arm, UNJUDGED, f"none of {len(base)} lengths could be compared with base", details)
    if lost:
        where = ", ".join(str(r["length"]) for r in lost[:12]) + (" ..." if len(lost) > 12 else "")
        worst = max(lost, key=lambda r: r["deficit_tokens"])
        return view.verdict(arm, FAIL, f"loses prefix-cache hits base keeps at {len(lost)} of {len(rows)} prompt "
                            f"lengths ({where}): at {worst['length']} tokens {worst['cached']} cached against "
                            f"base's {worst['base_cached']}, {worst['deficit_blocks']} blocks of {block} "
                            f"(the engine recomputes {allowed} by design)", details)
    if design:
        span = f"{design[0]['length']}-{design[-1]['length']}"
        many = "one block" if allowed == 1 else f"{allowed} blocks"
        return view.verdict(arm, NOTE, f"{many} of {block} tokens fewer cached than base at {len(design)} of "
                            f"{len(rows)} lengths ({span}): {why}; time to first token warm "
                            f"{details['warm_ttft_ms']} ms, cold {details['cold_ttft_ms']} ms (base's "
                            f"{details['base_warm_ttft_ms']} and {details['base_cold_ttft_ms']} ms)",
                            details)
    return view.verdict(arm, PASS, f"the same cached tokens as base at all {len(rows)} lengths", details)


def _base_verdict(view: ChannelView, base_arm: StoredArm, base: dict[int, Length], block: int) -> Verdict:
    failed = sum(1 for ln in base.values() for r in (ln.cold, ln.warm) if r is None or not r.ok)
    hits = [ln for ln in base.values() if ln.warm_cached]
    cold_hits = [ln.length for ln in base.values() if ln.cold_cached]
    details = {"lengths": len(base), "block_size": block, "warm_hits": len(hits), "cold_hits": cold_hits[:20],
               "cold_ttft_ms": _ms(_ttft(base, "cold")), "warm_ttft_ms": _ms(_ttft(base, "warm")),
               "table": [{"length": ln.length, "cold_cached": ln.cold_cached, "warm_cached": ln.warm_cached}
                         for ln in list(base.values())[:LOW]]}
    if not base or failed > len(base):
        return view.verdict(base_arm, INVALID, f"the reference: {failed} of {2 * len(base)} requests failed on base",
                            details)
    if all(ln.warm_cached is None for ln in base.values()):
        return view.verdict(base_arm, SKIP, "not measurable: base reports no cached tokens (neither "
                            "usage.prompt_tokens_details nor a prefix-cache hit counter)", details)
    if not hits:
        return view.verdict(base_arm, SKIP, "not exercised: base never hit its prefix cache (prefix caching off?)",
                            details)
    note = f"; {len(cold_hits)} cold requests hit (not cold)" if cold_hits else ""
    return view.verdict(base_arm, PASS, f"the reference: warm requests hit at {len(hits)} of {len(base)} lengths"
                        f"{note}", details)


def _acceptance(view: ChannelView, arm: StoredArm) -> Verdict:
    cold, warm = [0, 0], [0, 0]
    for ln in by_length(view, arm).values():
        if ln.cold is None or ln.warm is None or not same_tokens(ln.cold, ln.warm):
            continue  # warm vs cold only where the drafts had the same context
        for r, acc in ((ln.cold, cold), (ln.warm, warm)):
            ad = acceptance(r)
            if ad is not None:
                acc[0] += ad[0]
                acc[1] += ad[1]
    details: dict[str, Any] = {"cold_accepted": cold[0], "cold_drafted": cold[1], "warm_accepted": warm[0], "warm_drafted": warm[1],
               "z_threshold": Z_DROP, "min_drop": MIN_DROP}
    if not cold[1] or not warm[1]:
        return view.verdict(arm, SKIP, "not measurable: no draft counters per request", details, part="acceptance")
    rc, rw = cold[0] / cold[1], warm[0] / warm[1]
    z = z_two_proportions(cold[0], cold[1], warm[0], warm[1])
    details.update(cold=round(rc, 3), warm=round(rw, 3), z=None if z is None else round(z, 2))
    if z is not None and z < -Z_DROP and rc - rw > MIN_DROP:
        return view.verdict(arm, WARN, f"acceptance drops on warm requests: {rw:.3f} against {rc:.3f} cold "
                            f"(z = {z:.2f}): the drafter's cached state is not what it computes", details,
                            part="acceptance")
    return view.verdict(arm, PASS, f"acceptance warm {rw:.3f}, cold {rc:.3f}", details, part="acceptance")


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for n, ln in by_length(view, arm).items():
        for rnd, r in enumerate((ln.cold, ln.warm)):
            if r is not None:
                out[(n, rnd)] = Keyed((n, rnd), {"length": n, "round": ROUNDS[rnd]}, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    """Lengths whose warm answer on base differs from its cold one: the engine's own, not speculation's."""
    return {(n, 1): "base's own warm answer differs from its cold one" for (n, rnd), k in ref.items()
            if rnd == 1 and (n, 0) in ref and not same_tokens(k.result, ref[(n, 0)].result)}


def judge(view: ChannelView) -> list[Verdict]:
    """Cached tokens against base's, outputs against base's cold answer, acceptance warm vs cold, TTFT."""
    out = judge_against_base(view, _keyed, lambda key: (key[0], 0), _base_noise, what="requests", part="outputs")
    base_arm = view.base
    if base_arm is None:
        return out
    base = by_length(view, base_arm)
    block = int(facts(base_arm, NAME).get("block_size") or DEFAULT_BLOCK)
    base_row = _base_verdict(view, base_arm, base, block)
    out.append(base_row)
    for arm in view.arms:
        if arm.id == base_arm.id or view.role(arm) == BASE:
            continue
        if base_row.verdict in (SKIP, INVALID):
            out.append(view.verdict(arm, base_row.verdict if base_row.verdict == SKIP else UNJUDGED,
                                    f"no reference: {base_row.reason}"))
        else:
            out.append(_cache_verdict(view, arm, base, block))
        if view.role(arm) in SPECULATING:
            out.append(_acceptance(view, arm))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Prefix cache (cold and warm, by prompt length)",
    catches="prefix-cache hits a spec arm loses at some prompt lengths; a drafter or answer changed by a hit",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("spec_cache_miss",),
    engine_features=(FEATURE,),
    options={"lengths": f"B-1, B, B+1, B+2, 1.5B, then 2B-2 .. 2B-2+{SWEEP - 1} (B: the engine's block size)",
             "max_tokens": MAX_TOKENS, "rounds": list(ROUNDS), "z_drop": Z_DROP, "min_drop": MIN_DROP},
)
