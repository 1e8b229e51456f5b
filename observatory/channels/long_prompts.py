"""Long prompts: acceptance and speed per prompt-length bucket up to the arm's max_model_len.

Field bugs (docs/channels.md, "long_prompts"): acceptance that decays with
prompt length (a drafter whose position handling, rotary scaling or
attention window breaks on long contexts) while the output stays the
target's, so no diff sees it; the length sweep stops at 260 tokens.

Requests: ``SAMPLES`` questions (the suite's first prompts without tools),
each padded with filler to ``BUCKETS`` fractions of the longest prompt the
arm takes (its served ``max_model_len`` minus ``MAX_TOKENS``), token ids from
the server's own ``/tokenize`` (length_sweep's padding), greedy,
``MAX_TOKENS`` tokens, EOS ignored (every request drafts as long as the
others), streamed one at a time with the counters read around each, and the
whole set ``REPEATS`` times.

Verdicts:
- ``long_prompts`` (speculating arms): each longer bucket's acceptance (the
  mean of its samples' accepted/drafted rates) against the short buckets'
  (up to a quarter of the longest prompt), their samples pooled. The
  noise is the data's own: the spread between samples of one length (the
  pooled within-bucket standard deviation of the per-sample rates, whose
  repeats are averaged first; repeats that differ are shown, `repeat_spread`).
  A bucket below the shortest by more than 3.29 standard errors of the
  difference (two-sided p < 0.001) and by more than ``MIN_DROP`` is a WARN:
  acceptance drops with length.
- ``long_prompts:speed``: decode tok/s and time to first token per bucket,
  reported (they move with length by design: never judged).
- ``long_prompts:outputs``: each request diffed against base's at the same
  bucket and sample (token_diff's rule; pairs.py).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.engine_conditions import Z_DROP, acceptance, decode_rate, median, not_exercised
from observatory.channels.length_sweep import padded_ids
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.engines.server_facts import served_facts
from observatory.model.probes import Probe
from observatory.model.vocabulary import PASS, SKIP, SPECULATING, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "long_prompts"
BUCKETS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1.0)  # fractions of the longest prompt the arm takes
SAMPLES = 3
REPEATS = 2
MAX_TOKENS = 24
MIN_DROP = 0.05  # a drop in the accepted rate smaller than this is not reported, however sure
REFERENCE_FRACTION = 1 / 4  # buckets up to this fraction of the longest prompt, pooled, are the reference
FILLER = " The quick brown fox jumps over the lazy dog."
DEFAULT_QUESTIONS = ("Count from 1 to 20.", "Recite the alphabet.", "List the days of the week.")


def _question(p: Probe) -> str | None:
    if p.messages:
        users = [m.get("content") for m in p.messages if m.get("role") == "user"]
        text = users[-1] if users else None
        return text if isinstance(text, str) else None
    return p.prompt if isinstance(p.prompt, str) else None


def plan(suite: list[Probe]) -> list[Probe]:
    """One probe per (bucket, sample): the sample's question padded to the bucket's fraction at measure time."""
    questions = [q for p in suite if not p.tools and (q := _question(p))][:SAMPLES]
    questions += [q for q in DEFAULT_QUESTIONS if q not in questions][:SAMPLES - len(questions)]
    return [Probe(name=f"{NAME}/{b}/{s}", category=NAME, prompt=f"\nQuestion: {q}\nAnswer:",
                  max_tokens=MAX_TOKENS, channel=NAME, sampling={"ignore_eos": True},
                  meta={"bucket": b, "fraction": f, "sample": s})
            for b, f in enumerate(BUCKETS) for s, q in enumerate(questions)]


def longest_prompt(max_model_len: int) -> int:
    """The longest prompt a request of MAX_TOKENS tokens may have within MAX_MODEL_LEN."""
    return max_model_len - MAX_TOKENS - 1


def length_of(fraction: float, max_model_len: int) -> int:
    """A bucket's prompt length: FRACTION of the longest prompt, at least one token."""
    return max(1, int(fraction * longest_prompt(max_model_len)))


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Every (bucket, sample) once per repeat, in order, one at a time, with its counter delta."""
    assert run.client is not None  # a channel measures a live arm
    client = run.client
    limit = served_facts(client).get("max_model_len")
    filler = client.tokenize(FILLER)
    run.note(NAME, max_model_len=limit)
    for rep in range(REPEATS):
        for i, probe in enumerate(probes):
            run.reporter.step(run.arm, f"{NAME} (repeat {rep + 1})", i, len(probes))
            question = client.tokenize(str(probe.prompt))
            if not isinstance(limit, int) or not question or not filler:
                why = "no max_model_len served (/v1/models)" if not isinstance(limit, int) else "no /tokenize"
                run.store_result(probe, Response(error=f"not sent: {why}", error_kind="http"), NAME, repeat=rep)
                continue
            n = length_of(float(probe.meta["fraction"]), limit)
            sent = dataclasses.replace(probe, prompt=padded_ids(question, filler, n))
            before = run.counters()
            resp = client.run(sent, stream=True)
            delta = settled(run) - before if resp.ok else None
            run.store_result(probe, resp, NAME, delta, repeat=rep)
            run.check_alive(resp)
            if not run.live:
                return


# -- judging ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bucket:
    """One bucket's figures on one arm."""

    bucket: int
    length: int | None
    rates: list[float]  # per sample, its repeats averaged
    repeat_spread: float | None  # largest difference between one sample's repeats
    decode_tps: float | None
    ttft_ms: float | None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.rates) if self.rates else None


def buckets(view: ChannelView, arm: StoredArm) -> list[Bucket]:
    """The arm's figures per bucket, in bucket order."""
    by: dict[int, dict[int, list[StoredResult]]] = {}
    for r in view.results(arm):
        m = view.probe(r).meta
        by.setdefault(int(m["bucket"]), {}).setdefault(int(m["sample"]), []).append(r)
    out = []
    for b in sorted(by):
        rates, spreads, tps, ttft, lengths = [], [], [], [], []
        for rs in by[b].values():
            per = [a / d for x in rs if (ad := acceptance(x)) is not None for a, d in [ad]]
            if per:
                rates.append(statistics.fmean(per))
                spreads.append(max(per) - min(per))
            tps += [t for x in rs if (t := decode_rate(x)) is not None]
            ttft += [x.ttft_ms for x in rs if x.ok and x.ttft_ms is not None]
            lengths += [n for x in rs if isinstance(n := (x.usage or {}).get("prompt_tokens"), int)]
        out.append(Bucket(b, max(lengths) if lengths else None, rates, max(spreads) if spreads else None,
                          median(tps), median(ttft)))
    return out


def pooled_sd(groups: list[list[float]]) -> float | None:
    """The pooled within-group standard deviation (groups of two or more values), None without any."""
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) >= 2)
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    return math.sqrt(ss / df) if df > 0 else None


def drops(bs: list[Bucket]) -> tuple[list[dict[str, Any]], float | None]:
    """Each longer bucket against the short ones pooled: its table rows, and the pooled SD they were judged with.

    The reference is every sample of the buckets at most REFERENCE_FRACTION of the longest prompt: one
    bucket of SAMPLES prompts alone leaves too wide a standard error (docs/design.md section 4.2).
    """
    sd = pooled_sd([b.rates for b in bs])
    short = [b for b in bs if BUCKETS[b.bucket] <= REFERENCE_FRACTION and b.rates] if bs else []
    ref = [x for b in short for x in b.rates]
    ref_mean = statistics.fmean(ref) if ref else None
    rows = []
    for b in bs:
        row: dict[str, Any] = {"bucket": b.bucket, "prompt_tokens": b.length, "samples": len(b.rates),
                               "acceptance": None if b.mean is None else round(b.mean, 3),
                               "repeat_spread": None if b.repeat_spread is None else round(b.repeat_spread, 3),
                               "decode_tok_s": None if b.decode_tps is None else round(b.decode_tps, 1),
                               "ttft_ms": None if b.ttft_ms is None else round(b.ttft_ms, 1)}
        if b in short:
            row["trend"] = "reference"
        elif ref_mean is None or b.mean is None:
            row["trend"] = "not measurable"
        else:
            drop = ref_mean - b.mean
            se = None if sd is None else sd * math.sqrt(1 / len(ref) + 1 / len(b.rates))
            z = drop / se if se else None
            row.update(drop=round(drop, 3), z=None if z is None else round(z, 2))
            if se is None:
                row["trend"] = "not judged: no between-sample spread (fewer than two samples a bucket)"
            else:  # se 0: the samples agree exactly, so any drop past MIN_DROP is beyond the noise
                row["trend"] = "drop" if drop > MIN_DROP and (z is None or z > Z_DROP) else "steady"
        rows.append(row)
    return rows, sd


def _acceptance(view: ChannelView, arm: StoredArm) -> Verdict:
    bs = buckets(view, arm)
    rows, sd = drops(bs)
    details = {"table": rows, "pooled_sd": None if sd is None else round(sd, 4), "z_threshold": Z_DROP,
               "min_drop": MIN_DROP, "reference": f"buckets up to {REFERENCE_FRACTION:g} of the longest prompt"}
    if not any(b.rates for b in bs):
        return view.verdict(arm, SKIP, "acceptance not measurable: no draft counters per request", details)
    flagged = [r for r in rows if r.get("trend") == "drop"]
    if flagged:
        f = flagged[0]
        ref = [r for r in rows if r.get("trend") == "reference"]
        return view.verdict(arm, WARN, f"acceptance drops with prompt length: {f['acceptance']} at "
                            f"{f['prompt_tokens']} tokens, {f['drop']} below the prompts of at most "
                            f"{ref[-1]['prompt_tokens'] if ref else '?'} tokens (z = {f['z']}, beyond {Z_DROP} "
                            f"standard errors of the between-sample spread and {MIN_DROP})", details)
    longest = next((r for r in reversed(rows) if r.get("acceptance") is not None), rows[-1])
    return view.verdict(arm, PASS, f"acceptance steady up to {longest['prompt_tokens']} tokens "
                        f"({longest['acceptance']}; the short prompts' {rows[0]['acceptance']} and up)", details)


def _speed(view: ChannelView, arm: StoredArm) -> Verdict:
    rows, _ = drops(buckets(view, arm))
    table = [{k: r.get(k) for k in ("bucket", "prompt_tokens", "decode_tok_s", "ttft_ms")} for r in rows]
    if not any(r["decode_tok_s"] for r in table):
        return view.verdict(arm, SKIP, "speed not measurable: no decode rates", {"table": table}, part="speed")
    return view.verdict(arm, PASS, "decode speed and time to first token per length (reported, not judged)",
                        {"table": table}, part="speed")


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        m = view.probe(r).meta
        key = (int(m["bucket"]), int(m["sample"]), r.repeat)
        out[key] = Keyed(key, {"bucket": key[0], "sample": key[1], "repeat": key[2],
                               "prompt_tokens": (r.usage or {}).get("prompt_tokens")}, r)
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Outputs against base's; speculating arms' acceptance by length; speed reported."""
    out = judge_against_base(view, _keyed, lambda key: key, what="long prompts", part="outputs")
    for arm in view.arms:
        if view.role(arm) in SPECULATING:
            out.append(_acceptance(view, arm))
        out.append(_speed(view, arm))
    if not any(view.results(a) for a in view.arms):
        return [not_exercised(view, a, "no long prompt was sent") for a in view.arms]
    return out


CHANNEL = Channel(
    name=NAME,
    title="Long prompts (acceptance by length)",
    catches="acceptance that decays with prompt length while the output stays right",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("length_decay",),
    profile="deep",
    options={"buckets": [round(b, 4) for b in BUCKETS], "samples": SAMPLES, "repeats": REPEATS,
             "max_tokens": MAX_TOKENS, "min_drop": MIN_DROP, "z_drop": Z_DROP},
)
