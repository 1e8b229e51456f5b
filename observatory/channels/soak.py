"""Request sequences (soak): what one request leaves behind for the next, on one engine without restart.

Field bugs (docs/channels.md, "soak"): request A, then B, then A again, and
A's second answer differs from its first; a long prompt then a short one;
output or acceptance that degrades after many requests until a restart
(prefix caching with speculative state is where the worst of them live).

The sequence, sent in order, one at a time, streamed, greedy, each capped
at ``MAX_TOKENS`` = 16 tokens:

- ``A, B, A, B, C`` twice, where A is the suite's first probe, B its longest
  prompt and C its shortest (A, long B, A again; long B then short C);
- then the whole suite, ``SUITE_REPEATS`` = 2 times.

With the default suite (10 probes) that is 30 requests. Every request is
stored with ``repeat`` = its occurrence of that probe in the sequence and its
own counter delta, and judged:

- against base's request at the same occurrence (token ids, the token_diff
  gate's near-tie rule); where base's own occurrence differs from its first
  (base carries state too), or an A/A copy differs from base, a divergence is
  WARN "not attributable", never FAIL;
- against the arm's own first occurrence (shown per row: ``same_as_first``);
- acceptance by occurrence (part ``soak:acceptance``): an occurrence whose
  output equals the first occurrence's verifies the same drafts on the same
  context, so its acceptance should not move; a drop or a jump beyond a
  two-proportion z-test at |z| > 3.29 (two-sided p < 0.001, per comparison)
  is a WARN (a trend, not an output bug).
"""

from __future__ import annotations

import math
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base, same_tokens
from observatory.channels.view import ChannelView
from observatory.judge.stats import Z_P001
from observatory.model.probes import Probe
from observatory.model.vocabulary import PASS, SKIP, SPECULATING, WARN
from observatory.store.stored import StoredArm, Verdict

NAME = "soak"
MAX_TOKENS = 16
PATTERN_REPEATS = 2  # times "A, B, A, B, C" is sent
SUITE_REPEATS = 2  # times the whole suite is sent after it
Z_TREND = Z_P001  # two-sided p < 0.001 for one two-proportion comparison


def _size(p: Probe) -> int:
    """A prompt's size in characters (messages, or the completion prompt)."""
    if p.messages is not None:
        return sum(len(str(m.get("content") or "")) for m in p.messages)
    return len(str(p.prompt or ""))


def sequence(suite: list[Probe]) -> list[Probe]:
    """The suite's probes in the order the soak sends them (A, B long, A, B, C short; then the suite)."""
    if not suite:
        return []
    a, b, c = suite[0], max(suite, key=_size), min(suite, key=_size)
    return [a, b, a, b, c] * PATTERN_REPEATS + list(suite) * SUITE_REPEATS


def plan(suite: list[Probe]) -> list[Probe]:
    """One probe per request of the sequence, named by its index, carrying its source probe and occurrence."""
    out: list[Probe] = []
    seen: dict[str, int] = {}
    for i, p in enumerate(sequence(suite)):
        occ = seen.get(p.name, 0)
        seen[p.name] = occ + 1
        out.append(Probe(name=f"{NAME}/{i:03d}/{p.name}", category=p.category, messages=p.messages, prompt=p.prompt,
                         max_tokens=min(p.max_tokens, MAX_TOKENS), tools=p.tools, tool_choice=p.tool_choice,
                         channel=NAME, meta={"index": i, "of": p.name, "occurrence": occ}))
    return out


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The sequence in order to one live arm, each request with its own counter delta."""
    assert run.client is not None  # a channel measures a live arm
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, NAME, i, len(probes))
        before = run.counters()
        resp = run.client.run(probe, stream=True)
        delta = run.counters() - before if resp.ok else None
        run.store_result(probe, resp, NAME, delta, repeat=int(probe.meta["occurrence"]))
        run.check_alive(resp)
        if not run.live:
            return


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    by_key = {}
    for r in view.results(arm):
        m = view.probe(r).meta
        by_key[(m["of"], int(m["occurrence"]))] = (int(m["index"]), r)
    out = {}
    for key, (i, r) in by_key.items():
        first = by_key.get((key[0], 0))
        same = "first" if key[1] == 0 else ("yes" if first and same_tokens(r, first[1]) else "no")
        out[key] = Keyed(key, {"index": i, "probe": key[0], "occurrence": key[1], "same_as_first": same}, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    """Occurrences where base's own output differs from its first occurrence of the same probe."""
    out = {}
    for key, k in ref.items():
        first = ref.get((key[0], 0))
        if key[1] > 0 and first is not None and not same_tokens(k.result, first.result):
            out[key] = f"base's occurrence {key[1]} differs from its first"
    return out


def z_two_proportions(x1: int, n1: int, x2: int, n2: int) -> float | None:
    """The two-proportion z statistic of x2/n2 against x1/n1 (pooled); None when not defined."""
    if n1 <= 0 or n2 <= 0:
        return None
    p = (x1 + x2) / (n1 + n2)
    var = p * (1 - p) * (1 / n1 + 1 / n2)
    if var <= 0:
        return 0.0 if x1 * n2 == x2 * n1 else None
    return (x2 / n2 - x1 / n1) / math.sqrt(var)


def acceptance_trend(view: ChannelView, arm: StoredArm) -> Verdict:
    """Acceptance by occurrence against the first occurrence of the same probe (same output only)."""
    keyed = _keyed(view, arm)
    rows, flagged, unmeasured = [], [], 0
    for key, k in sorted(keyed.items(), key=lambda kv: kv[1].label["index"]):
        cd = k.result.counters_delta or {}
        acc, drafted = cd.get("accepted"), cd.get("draft_tokens")
        row: dict[str, Any] = {"index": k.label["index"], "probe": key[0], "occurrence": key[1],
                               "accepted": acc, "draft_tokens": drafted}
        first = keyed.get((key[0], 0))
        fcd = (first.result.counters_delta or {}) if first else {}
        if not isinstance(acc, int) or not isinstance(drafted, int) or not drafted:
            row["trend"] = "not measurable"
            unmeasured += 1
        elif key[1] == 0:
            row["trend"] = "first"
        elif k.label["same_as_first"] != "yes":
            row["trend"] = "output differs from the first: not compared"
        else:
            z = z_two_proportions(int(fcd.get("accepted") or 0), int(fcd.get("draft_tokens") or 0), acc, drafted)
            row["z"] = None if z is None else round(z, 2)
            row["trend"] = "steady" if z is None or abs(z) <= Z_TREND else ("drop" if z < 0 else "jump")
            if row["trend"] != "steady":
                flagged.append(row)
        rows.append(row)
    details = {"table": rows, "z_threshold": Z_TREND}
    if flagged:
        f = flagged[0]
        return view.verdict(arm, WARN, f"acceptance moves with repetition on the same output: {len(flagged)} "
                            f"occurrence(s); first: {f['probe']} occurrence {f['occurrence']} ({f['trend']}, "
                            f"z = {f['z']})", details, part="acceptance")
    if unmeasured == len(rows):
        return view.verdict(arm, SKIP, "acceptance not measurable: the engine reported no draft counters per request",
                            details, part="acceptance")
    return view.verdict(arm, PASS, f"acceptance steady across repeats (|z| <= {Z_TREND})", details,
                        part="acceptance")


def judge(view: ChannelView) -> list[Verdict]:
    """Each request against base's same occurrence; speculating arms' acceptance by occurrence."""
    rows = judge_against_base(view, _keyed, lambda key: key, _base_noise, what="requests of the sequence")
    rows += [acceptance_trend(view, a) for a in view.arms if view.role(a) in SPECULATING]
    return rows


CHANNEL = Channel(
    name=NAME,
    title="Request sequences (soak)",
    catches="state one request leaves for the next: A, B, A again answers differently; drift until restart",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("soak_poison",),
    options={"pattern": "A, B(long), A, B, C(short)", "pattern_repeats": PATTERN_REPEATS,
             "suite_repeats": SUITE_REPEATS, "max_tokens": MAX_TOKENS, "z_trend": Z_TREND},
)
