"""Speed figures of one arm from its stored results: tokens, TTFT, ITL, decode rate, throughput.

Tokens per request are the server's ``usage.completion_tokens`` (streams ask
for it with ``stream_options.include_usage``). The token ids that came back in
the stream's logprobs are only a cross-check: vLLM withholds the ids of
chunks its tool parser swallows (more on base than on spec arms), so counting
ids overstates a spec arm's speedup. Timed requests may carry no ids at all;
their chunks are ``[ms, null]`` (tokens per chunk unknown).

Bursty streams. An engine that hands a whole response over in one or two
chunks makes inter-token latency and the decode rate meaningless (a 3,736
tok/s "decode" that is really one delivery). A chunk may hold up to
``allowed`` tokens: 1 on an arm without speculation, k + 1 on a spec arm (one
verify step emits at most k + 1). The tokens beyond ``allowed`` in each chunk
arrived bunched for no reason speculation explains; when they are the
majority (``BURSTY_SHARE``), ITL and decode rate are not measurable (None,
with ``bursty`` saying why). Results without per-chunk counts contribute
``tokens - chunks * allowed`` (at least 0): the same excess, summed over the
response. The end-to-end rate (tokens over the whole request time) stays
measurable however tokens are grouped, so S is computed from it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from observatory.model.vocabulary import TOKEN_COUNT
from observatory.store.stored import StoredResult

BURSTY_SHARE = 0.5


def usage_tokens(r: StoredResult) -> int | None:
    """The server's completion token count of one result, or None when it reported none."""
    n = (r.usage or {}).get("completion_tokens")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def tokens_of(r: StoredResult) -> int | None:
    """Tokens of one result: usage first, the streamed ids only when the server reported no usage."""
    n = usage_tokens(r)
    if n is not None:
        return n
    return len(r.token_ids) if r.token_ids else None


def _chunks(r: StoredResult) -> list[tuple[float, int | None]]:
    out = []
    for c in r.chunks or []:
        if isinstance(c, (list, tuple)) and len(c) == 2 and c[0] is not None:
            out.append((float(c[0]), int(c[1]) if c[1] is not None else None))
    return out


def bunching(results: Sequence[StoredResult], allowed: int | None) -> dict[str, Any] | None:
    """Share of tokens that arrived in chunks beyond ALLOWED tokens; None when it cannot be told."""
    if allowed is None:
        return None
    excess = total = 0
    for r in results:
        ch, n = _chunks(r), tokens_of(r)
        if not ch or not n:
            continue
        if all(c is not None for _, c in ch):
            excess += sum(max(0, int(c) - allowed) for _, c in ch if c is not None)
            total += sum(int(c) for _, c in ch if c is not None)
        else:
            excess += max(0, n - len(ch) * allowed)
            total += n
    if not total:
        return None
    share = excess / total
    return {"share": share, "tokens": total, "bunched": excess, "allowed_per_chunk": allowed,
            "bursty": share > BURSTY_SHARE}


def token_count_check(results: Sequence[StoredResult]) -> dict[str, Any]:
    """The streamed ids against usage.completion_tokens, over results that have both."""
    both = [(len(r.token_ids), n) for r in results if r.token_ids and (n := usage_tokens(r)) is not None]
    off = [(i, u) for i, u in both if i != u]
    return {"requests": len(both), "disagree": len(off), "ids": sum(i for i, _ in both),
            "usage": sum(u for _, u in both)}


def _itl(results: Sequence[StoredResult]) -> list[float]:
    """Per-token gaps between chunks.

    A chunk of unknown size (a timed request carries no logprobs) is known to
    hold one token only when the response's token count equals its number of
    chunks; otherwise that response's gaps are not measurable and left out.
    """
    gaps: list[float] = []
    for r in results:
        ch, n = _chunks(r), tokens_of(r)
        if len(ch) < 2:
            continue
        if any(c is None for _, c in ch) and n != len(ch):
            continue
        for (t0, _), (t1, c) in itertools.pairwise(ch):
            size = float(c) if c is not None else 1.0
            if size <= 0:
                continue
            gaps.extend([(t1 - t0) / size] * max(1, round(size)))
    return gaps


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def _decode(results: Sequence[StoredResult]) -> tuple[float, float]:
    """(tokens after the first, seconds after the first token), summed (as `vllm bench serve`'s TPOT)."""
    tokens = secs = 0.0
    for r in results:
        n = tokens_of(r)
        if not n or n < 2 or r.ttft_ms is None or r.duration_ms is None:
            continue
        s = (float(r.duration_ms) - float(r.ttft_ms)) / 1000.0
        if s > 0:
            tokens, secs = tokens + n - 1, secs + s
    return tokens, secs


def _counted(results: Sequence[StoredResult]) -> Sequence[StoredResult]:
    """The results whose every chunk carries its token count."""
    return [r for r in results if _chunks(r) and all(c is not None for _, c in _chunks(r))]


def speed(single: Sequence[StoredResult], timed: Sequence[StoredResult] | None = None, measurements: list[Any] | None = None,
          allowed: int | None = None, streamed: Sequence[StoredResult] | None = None) -> dict[str, Any]:
    """TTFT, ITL, single-stream and decode tok/s (None when bursty), throughput per concurrency.

    SINGLE are the concurrency-1 results the single-stream figures come from;
    TIMED all timed results (for the tokens of each measurement); ALLOWED the
    most tokens one chunk may carry on this arm (None: unknown, bunching not judged);
    STREAMED the arm's streamed correctness results (per-chunk counts for the bunching).
    """
    # Bunching is judged on per-chunk counts where there are any (the streamed
    # correctness results keep them when timed requests ask for no logprobs);
    # else on tokens per chunk of SINGLE.
    burst = bunching(_counted(single) or _counted(streamed or []) or single, allowed)
    bursty = bool(burst and burst["bursty"])
    ttft = [float(r.ttft_ms) for r in single if r.ttft_ms is not None]
    itl = [] if bursty else _itl(single)
    d_tokens, d_secs = _decode(single)
    e2e = [[float(n), float(r.duration_ms) / 1000.0] for r in single
           if (n := tokens_of(r)) and r.duration_ms and r.duration_ms > 0]
    e2e_tokens = sum(t for t, _ in e2e)
    e2e_secs = sum(s for _, s in e2e)
    return {
        "requests": len(single),
        "token_source": "usage" if single and all(usage_tokens(r) is not None for r in single) else
                        ("ids" if single and all(usage_tokens(r) is None for r in single) else "mixed"),
        "ttft_ms": {"median": _pct(ttft, 50), "p90": _pct(ttft, 90)},
        "itl_ms": {"median": _pct(itl, 50), "p90": _pct(itl, 90)},
        "single_stream_tok_s": e2e_tokens / e2e_secs if e2e_secs > 0 else None,
        "decode_tok_s": None if bursty else (d_tokens / d_secs if d_secs > 0 else None),
        "bursty": burst,
        "samples": e2e,
        TOKEN_COUNT: token_count_check(single),
        "throughput": throughput(timed or [], measurements or []),
    }


def throughput(timed: Sequence[StoredResult], measurements: list[Any]) -> dict[str, Any]:
    """Aggregate tok/s per concurrency level: the usage tokens of each timed batch over its wall time."""
    tokens: dict[tuple[int, int], int] = defaultdict(int)
    known: dict[tuple[int, int], bool] = defaultdict(lambda: True)
    for r in timed:
        n = tokens_of(r)
        key = (int(r.concurrency), int(r.repeat))
        if n is None:
            known[key] = False
        else:
            tokens[key] += n
    by_level: dict[int, list[float]] = defaultdict(list)
    for m in measurements:
        key = (int(m.concurrency), int(m.repeat))
        n = tokens[key] if key in tokens and known[key] else m.completion_tokens
        if m.wall_s > 0:
            by_level[int(m.concurrency)].append(n / m.wall_s)
    return {str(k): {"tok_s": float(np.mean(v)), "repeats": len(v)} for k, v in sorted(by_level.items())}


def ttft_by_level(timed: Sequence[StoredResult]) -> dict[str, float | None]:
    """Median TTFT (ms) of the timed requests at each concurrency level."""
    by: dict[int, list[float]] = defaultdict(list)
    for r in timed:
        if r.ttft_ms is not None:
            by[int(r.concurrency)].append(float(r.ttft_ms))
    return {str(k): _pct(v, 50) for k, v in sorted(by.items())}


def stream_tau(results: Sequence[StoredResult]) -> dict[str, Any] | None:
    """Tokens per engine step as the stream shows them (spec arm, one chunk per verify step).

    The first chunk (the token prefill produced) and the last (a step a stop
    may cut short) of each response are left out. Needs per-chunk counts
    that cover every generated token: a stream that withheld ids (an engine
    that sends no logprobs for drafted tokens records no chunk for them) would
    read one token per chunk whatever the engine did, so such a response is
    left out. Returns the mean and its standard error, or None without enough chunks.
    """
    sizes: list[int] = []
    for r in results:
        ch = _chunks(r)
        if any(c is None for _, c in ch):
            continue
        n = usage_tokens(r)
        if n is not None and sum(int(c) for _, c in ch if c is not None) != n:
            continue
        sizes.extend(int(c) for _, c in ch[1:-1] if c is not None)
    if len(sizes) < 2:
        return None
    arr = np.asarray(sizes, dtype=float)
    return {"tau": float(arr.mean()), "se": float(arr.std(ddof=1) / np.sqrt(len(arr))), "chunks": len(sizes)}
