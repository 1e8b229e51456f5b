"""Channel ``sampling``: speculative sampling keeps the target distribution at temperature > 0.

Greedy equality says nothing about temperature > 0: a rejection sampler
that accepts a draft too often leaves the argmax chain intact and shifts
what users sample (docs/channels.md, section ``sampling``).

Plan: `PROMPTS` chat prompts, each sent `SAMPLES` times at temperature 1
(the last one also with top_p 0.9), `MAX_TOKENS` tokens each, `CONCURRENCY`
in flight.

Measure: every request has its own seed, derived per arm
(`request_seed`: the probe's planned ``seed0``, the arm's id, the draw's
index), so draws are independent within an arm and across arms; the seed
sent is stored with the result (``usage["request_seed"]``). The same seed on
base and its A/A copy would give identical draws and calibrate nothing.

Judge: for every probe and every position j < MAX_TOKENS, the marginal
distribution of the token at j (``END`` when the output stopped earlier)
on the arm vs on base, Pearson's chi-square with rare tokens merged
(`observatory.judge.stats`). Marginals, not conditionals: under a lossless
sampler the whole continuation has base's distribution, so the token at
each position does too, and every draw counts at every position (no
conditioning on prefixes that agree, which would leave few draws past the
first positions).

Beside them, one likelihood test per arm: every draw's mean logprob of the
tokens it sampled (the target's own logprobs, as the arm reports them), the
arm's against base's probe by probe (Welch's z, Stouffer over probes:
`observatory.judge.stats.mean_shift`). A sampler that accepts drafts too
often emits tokens the target finds likelier than its own samples are; on a
real model's prose, where each position has thousands of candidates, the
positional tests merge most of them into "rare" and lose that shift (the
field model's nightly selftest missed ``biased_accept`` with them alone:
docs/channels.md). An arm whose engine reports no logprobs for drafted
tokens gets no likelihood test ("not measurable").

All tests of one arm, positional and likelihood, are corrected together
(Holm, family-wise ``ALPHA``). An arm with a rejected test FAILs, unless the
A/A copy (judged the same way) also shows a difference: then WARN, not
attributable. The false-alarm rate and the smallest shift the test detects
at these counts are simulated in tests/channels/test_channel_sampling.py.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.engines.adapter import adapter_for
from observatory.judge.stats import MeanShift, chi2_two_sample, holm, mean_shift
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, FAIL, INVALID, JUDGED_AGAINST_BASE, PASS, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "sampling"
SAMPLES = 128  # draws per probe per arm (5 x 128 x 6 tokens: about 40 s per arm on the tiny CPU model)
MAX_TOKENS = 6  # positions compared per probe
CONCURRENCY = 8  # requests in flight (each has its own seed: batching does not change a draw's law)
ALPHA = 0.01  # family-wise false-alarm rate per arm (Holm over probes x positions)
MIN_OK = 0.9  # share of draws per side that must have come back for a verdict
SEED0 = 1_000
END = "end"  # the category of a position past the output's end
# Open prompts outside the bundled model's training tasks: it is unsure there (a top token of 0.4-0.9
# at most positions at temperature 1), so draws vary and a shift has room to show. On its own tasks
# (counting, recitation) nearly every position is certain and a biased sampler changes nothing.
PROMPTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("poem", "Write a poem about autumn leaves.", {"temperature": 1.0}),
    ("city", "Describe your favourite city.", {"temperature": 1.0}),
    ("bread", "How do I bake bread at home? Explain the steps.", {"temperature": 1.0}),
    ("bicycle", "Explain how a bicycle works.", {"temperature": 1.0}),
    ("poem-top-p", "Write a poem about autumn leaves.", {"temperature": 1.0, "top_p": 0.9}),
)


@dataclass(frozen=True)
class PositionResult:
    """One probe's position tested on one arm: the test and whether Holm rejected it."""

    probe: str
    pos: int
    p: float
    stat: float
    df: int
    rejected: bool
    base_top: str
    arm_top: str


def plan(suite: list[Probe]) -> list[Probe]:
    """The channel's probes: `PROMPTS`, each drawn `SAMPLES` times per arm (the suite is not used)."""
    return [
        Probe(name=f"{NAME}-{key}", category="prose_en", messages=[{"role": "user", "content": text}],
              max_tokens=MAX_TOKENS, channel=NAME, sampling=dict(params),
              meta={"samples": SAMPLES, "seed0": SEED0 + 10_000 * i})
        for i, (key, text, params) in enumerate(PROMPTS)
    ]


def request_seed(seed0: int, arm_id: int, index: int) -> int:
    """The seed of draw INDEX of a probe on arm ARM_ID: distinct across arms, probes and draws."""
    return (seed0 + 1_000_003 * arm_id + index) % (2**31 - 1)


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Send every draw of every probe to the live arm (seeded per arm), store each with its seed."""
    assert run.client is not None
    client = run.client
    work: list[tuple[Probe, int, int]] = []
    for probe in probes:
        n = int(probe.meta.get("samples", SAMPLES))
        for i in range(n):
            work.append((probe, i, request_seed(int(probe.meta.get("seed0", SEED0)), run.arm_id, i)))

    def one(item: tuple[Probe, int, int]) -> Any:
        probe, _, seed = item
        return client.run(replace(probe, sampling={**probe.sampling, "seed": seed}), stream=False)

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as ex:
        resps = list(ex.map(one, work))
    for (probe, i, seed), resp in zip(work, resps):
        resp.usage = {**(resp.usage or {}), "request_seed": seed}
        run.store_result(probe, resp, NAME, repeat=i, concurrency=CONCURRENCY)
        run.check_alive(resp)
        if not run.live:
            return


def _draws(results: list[StoredResult], pos: int) -> list[Hashable]:
    """The token at POS of every result (END past its end)."""
    return [r.token_ids[pos] if pos < len(r.token_ids or []) else END for r in results]


def _top(draws: list[Hashable]) -> str:
    if not draws:
        return "-"
    tok, n = max(((t, draws.count(t)) for t in set(draws)), key=lambda x: (x[1], str(x[0])))
    return f"{tok} ({n}/{len(draws)})"


def compare(base: dict[str, list[StoredResult]], arm: dict[str, list[StoredResult]], positions: int,
            alpha: float = ALPHA, lik: Likelihood | None = None) -> tuple[list[PositionResult], Likelihood | None]:
    """Every (probe, position) of ARM's draws against BASE's, and LIK's test if it has one, Holm-corrected
    at ALPHA together."""
    rows: list[tuple[str, int, Any, list[Hashable], list[Hashable]]] = []
    for name in sorted(base):
        for pos in range(positions):
            a, b = _draws(base[name], pos), _draws(arm.get(name, []), pos)
            rows.append((name, pos, chi2_two_sample(a, b), a, b))
    pvalues = [t.p for _, _, t, _, _ in rows]
    if lik is not None and lik.shift is not None:
        pvalues.append(lik.shift.p)
    rejected = holm(pvalues, alpha)
    if lik is not None and lik.shift is not None:
        lik = replace(lik, rejected=rejected[-1])
    return [PositionResult(name, pos, t.p, t.stat, t.df, rej, _top(a), _top(b))
            for (name, pos, t, a, b), rej in zip(rows, rejected)], lik


def _by_probe(view: ChannelView, arm: StoredArm) -> tuple[dict[str, list[StoredResult]], int, int, set[int]]:
    """OK results by probe name; how many draws were planned and came back; the seeds sent."""
    out: dict[str, list[StoredResult]] = {}
    seeds: set[int] = set()
    sent = 0
    for r in view.results(arm):
        sent += 1
        if r.ok:
            out.setdefault(view.probe(r).name, []).append(r)
        s = (r.usage or {}).get("request_seed")
        if isinstance(s, int):
            seeds.add(s)
    planned = sum(int(p.meta.get("samples", SAMPLES)) for p in view.probes.values())
    return out, planned, sum(len(v) for v in out.values()), seeds


@dataclass(frozen=True)
class Likelihood:
    """One arm's likelihood test: the mean-logprob shift against base (None: not measurable, and why)."""

    shift: MeanShift | None
    why: str = ""
    base_mean: float | None = None
    arm_mean: float | None = None
    rejected: bool = False


def _mean_logprobs(by_probe: dict[str, list[StoredResult]]) -> dict[str, list[float]]:
    """Each draw's mean logprob of its sampled tokens, by probe (draws without a finite logprob per token left out)."""
    out: dict[str, list[float]] = {}
    for name, rows in by_probe.items():
        vals = []
        for r in rows:
            lps = r.logprobs or []
            if lps and len(lps) == len(r.token_ids or []) and all(
                    isinstance(x, (int, float)) and math.isfinite(x) for x in lps):
                vals.append(sum(float(x) for x in lps) / len(lps))
        out[name] = vals
    return out


def _drafted_logprobs(arm: StoredArm) -> bool:
    """Whether ARM's engine reports logprobs for tokens it accepted from a draft (its adapter's word)."""
    spec = (arm.launch or {}).get("speculative_config") is not None
    return not spec or adapter_for(arm.engine).streams_drafted_ids


def likelihood(base: dict[str, list[float]], arm: dict[str, list[float]], arm_row: StoredArm,
               planned: int) -> Likelihood:
    """The likelihood test of one arm's draws against base's (MIN_OK of the planned draws needed a side)."""
    if not _drafted_logprobs(arm_row):
        return Likelihood(None, f"{arm_row.name}'s engine reports no logprobs for drafted tokens")
    names = sorted(base)
    nb, na = sum(len(base[n]) for n in names), sum(len(arm.get(n, [])) for n in names)
    if nb < MIN_OK * planned or na < MIN_OK * planned:
        return Likelihood(None, f"logprobs came back for {nb} base and {na} arm draws of {planned}")
    shift = mean_shift([base[n] for n in names], [arm.get(n, []) for n in names])
    return Likelihood(shift, "", _pooled_mean([base[n] for n in names]), _pooled_mean([arm.get(n, []) for n in names]))


def _pooled_mean(groups: list[list[float]]) -> float:
    n = sum(len(g) for g in groups)
    return sum(sum(g) for g in groups) / n if n else 0.0


def _table(results: list[PositionResult], lik: Likelihood | None = None) -> list[dict[str, Any]]:
    """The likelihood test's row, then rejected tests and each probe's smallest p-value (a row per probe and
    position)."""
    best: dict[str, PositionResult] = {}
    for t in results:
        if t.probe not in best or t.p < best[t.probe].p:
            best[t.probe] = t
    keep = [t for t in results if t.rejected or best[t.probe] is t]
    rows = [{"probe": t.probe, "position": t.pos, "base top token": t.base_top, "arm top token": t.arm_top,
             "chi2": round(t.stat, 2), "df": t.df, "p": f"{t.p:.2g}", "after Holm": "differs" if t.rejected else "-"}
            for t in keep]
    if lik is not None and lik.shift is not None and lik.base_mean is not None and lik.arm_mean is not None:
        rows.insert(0, {"probe": f"every probe ({lik.shift.groups})", "position": "all",
                        "base top token": f"mean logprob {lik.base_mean:.3f}",
                        "arm top token": f"mean logprob {lik.arm_mean:.3f}", "chi2": f"z {lik.shift.z:+.2f}",
                        "df": "-", "p": f"{lik.shift.p:.2g}", "after Holm": "differs" if lik.rejected else "-"})
    return rows


def _smallest_p(res: list[PositionResult], lik: Likelihood | None) -> float:
    """The smallest p-value among the rejected tests."""
    ps = [t.p for t in res if t.rejected] + ([lik.shift.p] if lik is not None and lik.rejected and lik.shift else [])
    return min(ps, default=1.0)


def _likelihood_details(lik: Likelihood | None) -> dict[str, Any]:
    if lik is None or lik.shift is None:
        return {"likelihood": {"measured": False, "why": lik.why if lik else "not run"}}
    return {"likelihood": {"measured": True, "z": round(lik.shift.z, 3), "p": lik.shift.p, "rejected": lik.rejected,
                           "mean_logprob_base": lik.base_mean, "mean_logprob_arm": lik.arm_mean,
                           "delta_per_probe": [round(d, 4) for d in lik.shift.deltas]}}


def judge(view: ChannelView) -> list[Verdict]:
    """Each arm's sampled token distributions against base's; A/A differences make a FAIL a WARN."""
    base = view.base
    if base is None:
        return []
    base_by, planned, got, base_seeds = _by_probe(view, base)
    out: list[Verdict] = []
    if not planned:
        return out
    if got < MIN_OK * planned:
        return [view.verdict(base, INVALID, f"base answered {got} of {planned} sampled requests: "
                             "no reference distribution")]
    positions = max(p.max_tokens for p in view.probes.values())
    base_lp = _mean_logprobs(base_by)
    judged: dict[int, tuple[StoredArm, list[PositionResult] | None, str]] = {}
    liks: dict[int, Likelihood | None] = {}
    for arm in view.arms:
        if arm.id == base.id or view.role(arm) not in JUDGED_AGAINST_BASE:
            continue
        arm_by, _, arm_got, seeds = _by_probe(view, arm)
        if arm_got < MIN_OK * planned:
            judged[arm.id] = (arm, None, f"{arm.name} answered {arm_got} of {planned} sampled requests")
            continue
        if seeds & base_seeds:
            judged[arm.id] = (arm, None, f"{arm.name} reused {len(seeds & base_seeds)} of base's seeds: "
                              "its draws are not independent of base's")
            continue
        tested, liks[arm.id] = compare(base_by, arm_by, positions,
                                       lik=likelihood(base_lp, _mean_logprobs(arm_by), arm, planned))
        judged[arm.id] = (arm, tested, "")

    def differs(arm_id: int, res: list[PositionResult]) -> list[str]:
        lik = liks.get(arm_id)
        return [f"{t.probe}@{t.pos}" for t in res if t.rejected] + (
            [f"the mean logprob of sampled tokens ({lik.arm_mean:.3f} vs base {lik.base_mean:.3f}, "
             f"z {lik.shift.z:+.1f}, p {lik.shift.p:.1g})"]
            if lik is not None and lik.rejected and lik.shift and lik.arm_mean is not None
            and lik.base_mean is not None else [])

    aa_differs = [a.name for a, res, _ in judged.values()
                  if view.role(a) == AA_COPY and res is not None and differs(a.id, res)]
    m = len(view.probes) * positions
    for arm, res, why in judged.values():
        if res is None:
            out.append(view.verdict(arm, INVALID, why))
            continue
        lik = liks.get(arm.id)
        bad = differs(arm.id, res)
        tests = m + (1 if lik is not None and lik.shift is not None else 0)
        details = {"table": _table(res, lik), "draws_per_probe": planned // max(len(view.probes), 1),
                   "tests": tests, "alpha": ALPHA, **_likelihood_details(lik)}
        if not bad:
            also = (" and in the mean logprob of what was sampled" if lik is not None and lik.shift is not None
                    else f"; likelihood test not measurable ({lik.why})" if lik is not None else "")
            out.append(view.verdict(arm, PASS, f"sampled token distributions match base at {m} probe positions"
                                    f"{also} (chi-square, Holm, family-wise alpha {ALPHA})", details))
            continue
        where = ", ".join(bad[:4]) + (" ..." if len(bad) > 4 else "")
        if view.role(arm) == AA_COPY:
            out.append(view.verdict(arm, WARN, f"the A/A copy's sampled distribution differs from base at "
                                    f"{where}: base's own sampling varies between launches", details))
        elif aa_differs:
            out.append(view.verdict(arm, WARN, f"sampled distribution differs from base at {where}, but so does "
                                    f"the A/A copy ({', '.join(aa_differs)}): not attributable", details))
        elif not any(t.rejected for t in res):  # the likelihood test alone: the sampler, or the logprobs it reports
            out.append(view.verdict(arm, FAIL, f"the arm's draws differ from base's in {where} (Holm over {tests} "
                                    f"tests at alpha {ALPHA}): speculative sampling is not lossless, or the logprobs "
                                    "it reports are not the target's (answer_fields and teacher judge those)",
                                    details))
        else:
            out.append(view.verdict(arm, FAIL, f"sampled token distribution differs from base at {where} "
                                    f"(smallest p {_smallest_p(res, lik):.1g}; Holm over {tests} tests at alpha "
                                    f"{ALPHA}): speculative sampling is not lossless", details))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Sampling at temperature > 0",
    catches="a rejection sampler that shifts the sampled distribution while greedy output stays exact",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("biased_accept",),
    options={"samples": SAMPLES, "max_tokens": MAX_TOKENS, "prompts": len(PROMPTS), "alpha": ALPHA,
             "concurrency": CONCURRENCY},
)
