"""Lifecycle: run part of the suite, put the engine through one of its own cycles, run it again.

Field bugs (docs/channels.md, "lifecycle"): a drafter left broken after
sleep/wake or a weight reload, a prefix cache that serves stale blocks after
a reset. Each cycle is an operation the engine exposes (its dev-mode
endpoints, turned on by its adapter's ``dev_mode_env``):

``reset_prefix_cache``  ``POST /reset_prefix_cache``;
``sleep_wake``          ``POST /sleep?level=1``, ``GET /is_sleeping``, ``POST /wake_up``;
``pause_resume``        ``POST /pause?mode=wait``, ``POST /resume``;
``reload_weights``      ``POST /collective_rpc`` ``{"method": "reload_weights"}``.

Where the arm's own server exposes them (``GET /is_sleeping`` answers) the
cycles run there; otherwise on a second engine of the arm launched with the
variable set (`LiveArm.sibling`). An operation the server does not expose
(HTTP 404) or refuses is "not exercised", by name.

Requests: up to ``PART`` suite probes without tools, at most ``MAX_TOKENS``
tokens, streamed, one at a time, with the counters read around each: twice
before any cycle (``repeat`` 0 and 1: how far a request moves with nothing
changed), then once after each cycle (``repeat`` 2 + the operation's index).

Verdicts, per arm:
- ``lifecycle``: after each cycle every output must equal the arm's own
  output before (repeat 0), token for token: FAIL, WARN where the two runs
  before already differ (not attributable);
- ``lifecycle:acceptance`` (speculating arms): the accepted/drafted rate after
  each cycle, pooled over its requests, against before's, two-proportion
  z-test; |z| > 3.29 (two-sided p < 0.001) beyond what the two runs before
  show between themselves is a WARN, a drop or a jump;
- ``lifecycle:speed``: the median over requests of ln(tok/s after / before,
  the whole request's); below minus the largest such move between the two runs before,
  per request (the session's own noise with nothing changed), is a WARN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.engine_conditions import (
    Z_DROP,
    acceptance,
    facts,
    log_ratio,
    median,
    not_exercised,
    request_rate,
    sibling_problem,
)
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import same_tokens
from observatory.channels.soak import z_two_proportions
from observatory.channels.view import ChannelView
from observatory.client.send import EngineClient
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, PASS, SKIP, SPECULATING, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "lifecycle"
PART = 4  # suite probes sent around each cycle
MAX_TOKENS = 32
BEFORE = (0, 1)  # the repeats before any cycle
OP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Op:
    """One engine cycle: its name and how it is done (returns "exercised" or why not)."""

    name: str
    run: Callable[[Any], str]


def _post(client: EngineClient, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
    r = client.fetch(path, OP_TIMEOUT_S, body if body is not None else {})
    return r.status_code, r.text[:300]


def _get(client: EngineClient, path: str) -> tuple[int, str]:
    r = client.fetch(path, OP_TIMEOUT_S)
    return r.status_code, r.text[:300]


def _outcome(steps: list[tuple[str, int, str]]) -> str:
    """ "exercised" when every step answered 200; else which step did not, and how."""
    for what, status, text in steps:
        if status == 404:
            return f"not exposed: {what} answered 404"
        if status != 200:
            return f"refused: {what} answered HTTP {status}: {text}"
    return "exercised"


def _reset_prefix_cache(client: EngineClient) -> str:
    status, text = _post(client, "/reset_prefix_cache")
    out = _outcome([("POST /reset_prefix_cache", status, text)])
    if out == "exercised" and '"success":false' in text.replace(" ", ""):
        return f"refused: POST /reset_prefix_cache answered {text}"
    return out


def _sleep_wake(client: EngineClient) -> str:
    steps = [("POST /sleep?level=1", *_post(client, "/sleep?level=1"))]
    if steps[-1][1] == 200:
        steps.append(("GET /is_sleeping", *_get(client, "/is_sleeping")))
        steps.append(("POST /wake_up", *_post(client, "/wake_up")))  # woken whatever /is_sleeping said
        slept = '"is_sleeping":true' in steps[1][2].replace(" ", "")
        if steps[-1][1] == 200 and not slept:
            return f"refused: GET /is_sleeping after /sleep answered {steps[1][2]}"
    return _outcome(steps)


def _pause_resume(client: EngineClient) -> str:
    steps = [("POST /pause?mode=wait", *_post(client, "/pause?mode=wait"))]
    if steps[-1][1] == 200:
        steps.append(("POST /resume", *_post(client, "/resume")))
    return _outcome(steps)


def _reload_weights(client: EngineClient) -> str:
    status, text = _post(client, "/collective_rpc", {"method": "reload_weights"})
    return _outcome([("POST /collective_rpc reload_weights", status, text)])


OPS = (Op("reset_prefix_cache", _reset_prefix_cache), Op("sleep_wake", _sleep_wake),
       Op("pause_resume", _pause_resume), Op("reload_weights", _reload_weights))


def plan(suite: list[Probe]) -> list[Probe]:
    """Up to PART suite probes without tools, one per category first, at most MAX_TOKENS tokens."""
    picked: list[Probe] = []
    pool = [p for p in suite if not p.tools]
    for p in pool:
        if len(picked) < PART and p.category not in {q.category for q in picked}:
            picked.append(p)
    for p in pool:
        if len(picked) < PART and p not in picked:
            picked.append(p)
    return [Probe(name=f"{NAME}/{i:02d}/{p.name}", category=p.category, messages=p.messages, prompt=p.prompt,
                  max_tokens=min(p.max_tokens, MAX_TOKENS), channel=NAME, meta={"index": i, "of": p.name})
            for i, p in enumerate(picked)]


def has_dev_endpoints(client: EngineClient) -> bool:
    """Whether the server exposes the dev-mode endpoints (``GET /is_sleeping`` answers 200)."""
    try:
        return bool(client.fetch("/is_sleeping", 10.0).status_code == 200)
    except httpx.HTTPError:
        return False


def _send(run: LiveArm, probes: list[Probe], repeat: int) -> None:
    assert run.client is not None  # a channel measures a live arm
    for probe in probes:
        before = run.counters()
        resp = run.client.run(probe, stream=True)
        delta = settled(run) - before if resp.ok else None
        run.store_result(probe, resp, NAME, delta, repeat=repeat)
        run.check_alive(resp)


def cycle(run: LiveArm, probes: list[Probe], where: str) -> None:
    """The part twice, then each operation and the part again; what each operation did is noted."""
    ops: dict[str, str] = {}
    run.note(NAME, where=where, ops=ops)
    for rep in BEFORE:
        run.reporter.step(run.arm, f"{NAME} before", rep, len(BEFORE))
        _send(run, probes, rep)
    for j, op in enumerate(OPS):
        run.reporter.step(run.arm, f"{NAME} {op.name}", j, len(OPS))
        try:
            ops[op.name] = op.run(run.client)
        except httpx.HTTPError as e:
            ops[op.name] = f"refused: {type(e).__name__}: {e}"
        run.note(NAME, ops=ops)
        if ops[op.name] != "exercised":
            run.check_alive(None, f"{op.name}: {ops[op.name]}")  # an operation that killed the engine ends here
            continue
        _send(run, probes, len(BEFORE) + j)


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The cycles on the arm's own server where it exposes them, else on a second engine in dev mode."""
    assert run.client is not None  # a channel measures a live arm
    if not probes:
        return
    if has_dev_endpoints(run.client):
        cycle(run, probes, "the arm's own engine")
        return
    with run.sibling(NAME, env=dict(run.client.adapter.dev_mode_env)) as twin:
        if twin is not None:
            if twin.client is None or not has_dev_endpoints(twin.client):
                twin.note(NAME, where="a second engine in dev mode", ops={op.name: "not exposed: GET /is_sleeping "
                                                                       "did not answer" for op in OPS})
                return
            cycle(twin, probes, "a second engine in dev mode")


# -- judging ----------------------------------------------------------------
def _by_repeat(view: ChannelView, arm: StoredArm) -> dict[int, dict[str, StoredResult]]:
    out: dict[int, dict[str, StoredResult]] = {}
    for r in view.results(arm):
        out.setdefault(r.repeat, {})[view.probe(r).name] = r
    return out


def _exercised(arm: StoredArm) -> tuple[list[tuple[int, str]], dict[str, str], str | None]:
    """([(repeat, op)] exercised, {op: why not} for the others, why nothing ran at all or None)."""
    f = facts(arm, NAME)
    problem = sibling_problem(arm, NAME)
    got = f.get("ops")
    ops: dict[str, Any] = got if isinstance(got, dict) else {}
    done = [(len(BEFORE) + j, op.name) for j, op in enumerate(OPS) if ops.get(op.name) == "exercised"]
    skipped = {op.name: str(ops.get(op.name, "not reached")) for op in OPS if ops.get(op.name) != "exercised"}
    if problem:
        return done, skipped, problem
    if not f:
        return done, skipped, "the channel did not run on this arm"
    if not done:
        return done, skipped, "no cycle exercised (" + "; ".join(f"{k}: {v}" for k, v in skipped.items()) + ")"
    return done, skipped, None


def _outputs(view: ChannelView, arm: StoredArm, base_changed: frozenset[tuple[str, str]] = frozenset()) -> Verdict:
    """ARM's outputs after each cycle against its own before it. BASE_CHANGED: the (op, probe) pairs whose
    output changed after the cycle on base as well: there the engine's cycle changes what any arm answers
    (a FAIL of base's, docs/engines.md), so another arm's change is WARN, not attributable to it."""
    done, skipped, none = _exercised(arm)
    details: dict[str, Any] = {"not_exercised": skipped, "where": facts(arm, NAME).get("where")}
    if none:
        return not_exercised(view, arm, none, details)
    reps = _by_repeat(view, arm)
    ref, again = reps.get(0, {}), reps.get(1, {})
    rows: list[dict[str, Any]] = []
    fails: list[dict[str, Any]] = []
    warns: list[dict[str, Any]] = []
    for rep, op in done:
        for name, r in sorted(reps.get(rep, {}).items()):
            first = ref.get(name)
            steady = same_tokens(first, again.get(name))
            same = same_tokens(first, r)
            probe = view.probe(r).meta.get("of")
            on_base = (op, probe) in base_changed
            verdict = PASS if same else (FAIL if steady and not on_base else WARN)
            row = {"op": op, "probe": probe, "verdict": verdict,
                   "kind": "equal" if same else ("not attributable: the two runs before differ" if not steady
                                                 else "not attributable: base's output changes after the same "
                                                 "cycle" if on_base else "differs after the cycle"),
                   "position": _first_difference(first, r)}
            rows.append(row)
            (fails if verdict == FAIL else warns if verdict == WARN else []).append(row)
    details.update(table=rows, fail=len(fails), warn=len(warns))
    if fails:
        f = fails[0]
        return view.verdict(arm, FAIL, f"{len(fails)} of {len(rows)} outputs differ from the same request before "
                            f"the cycle; first: {f['probe']} after {f['op']}, at token {f['position']}", details)
    if warns:
        return view.verdict(arm, WARN, f"{len(warns)} of {len(rows)} outputs differ after a cycle where the two "
                            "runs before differ too, or base's output changes after the same cycle (not "
                            "attributable)", details)
    ops = ", ".join(op for _, op in done)
    return view.verdict(arm, PASS, f"all {len(rows)} outputs equal before and after {ops}"
                        + (f"; not exercised: {', '.join(skipped)}" if skipped else ""), details)


def _first_difference(a: StoredResult | None, b: StoredResult) -> int | None:
    if a is None:
        return None
    x, y = list(a.token_ids or []), list(b.token_ids or [])
    for i, (s, t) in enumerate(zip(x, y)):
        if s != t:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def _pooled(results: dict[str, StoredResult]) -> tuple[int, int] | None:
    got = [acceptance(r) for r in results.values()]
    known = [g for g in got if g is not None]
    if not known:
        return None
    return sum(a for a, _ in known), sum(d for _, d in known)


def _acceptance(view: ChannelView, arm: StoredArm) -> Verdict:
    done, skipped, none = _exercised(arm)
    if none:
        return not_exercised(view, arm, none, {"not_exercised": skipped}, part="acceptance")
    reps = _by_repeat(view, arm)
    ref, again = _pooled(reps.get(0, {})), _pooled(reps.get(1, {}))
    if ref is None:
        return view.verdict(arm, SKIP, "acceptance not measurable: no draft counters per request",
                            {"not_exercised": skipped}, part="acceptance")
    z_noise = z_two_proportions(ref[0], ref[1], *again) if again else None
    rows: list[dict[str, Any]] = [{"op": "before (repeat 1)", "accepted": again[0] if again else None,
                                   "drafted": again[1] if again else None,
                                   "z": None if z_noise is None else round(z_noise, 2)}]
    flagged = []
    noise_floor = abs(z_noise) if z_noise is not None else 0.0
    for rep, op in done:
        got = _pooled(reps.get(rep, {}))
        if got is None:
            rows.append({"op": op, "trend": "not measurable"})
            continue
        z = z_two_proportions(ref[0], ref[1], *got)
        trend = "steady" if z is None or abs(z) <= max(Z_DROP, noise_floor) else ("drop" if z < 0 else "jump")
        row = {"op": op, "accepted": got[0], "drafted": got[1], "rate": round(got[0] / got[1], 3),
               "z": None if z is None else round(z, 2), "trend": trend}
        rows.append(row)
        if trend != "steady":
            flagged.append(row)
    details = {"before": {"accepted": ref[0], "drafted": ref[1], "rate": round(ref[0] / ref[1], 3)},
               "z_threshold": Z_DROP, "noise_z": rows[0]["z"], "table": rows, "not_exercised": skipped}
    if flagged:
        f = flagged[0]
        return view.verdict(arm, WARN, f"acceptance moves after {f['op']}: {f['rate']} against "
                            f"{details['before']['rate']} before (z = {f['z']}, beyond {Z_DROP} and the runs "
                            "before)", details, part="acceptance")
    return view.verdict(arm, PASS, f"acceptance back after every cycle (|z| <= {max(Z_DROP, noise_floor):.2f})",
                        details, part="acceptance")


def _move(r: StoredResult, before: StoredResult | None) -> float | None:
    """ln(R's tok/s / BEFORE's), None where either is not measurable."""
    return None if before is None else log_ratio(request_rate(r), request_rate(before))


def _speed(view: ChannelView, arm: StoredArm) -> Verdict:
    done, skipped, none = _exercised(arm)
    if none:
        return not_exercised(view, arm, none, {"not_exercised": skipped}, part="speed")
    reps = _by_repeat(view, arm)
    ref, again = reps.get(0, {}), reps.get(1, {})
    moves = [abs(m) for name, r in again.items() if (m := _move(r, ref.get(name))) is not None]
    if not moves:
        return view.verdict(arm, SKIP, "speed not measurable: no request rates before the cycles",
                            {"not_exercised": skipped}, part="speed")
    noise = max(moves)
    rows, flagged = [], []
    for rep, op in done:
        logs = [m for name, r in reps.get(rep, {}).items() if (m := _move(r, ref.get(name))) is not None]
        med = median(logs)
        row = {"op": op, "median_log_ratio": None if med is None else round(med, 3),
               "noise": round(noise, 3), "slower": med is not None and med < -noise}
        rows.append(row)
        if row["slower"]:
            flagged.append(row)
    details = {"table": rows, "noise": round(noise, 3), "not_exercised": skipped}
    if flagged:
        f = flagged[0]
        return view.verdict(arm, WARN, f"slower after {f['op']}: median ln(after/before) "
                            f"{f['median_log_ratio']} beyond the runs before's largest move {f['noise']}", details,
                            part="speed")
    return view.verdict(arm, PASS, f"tok/s back after every cycle (within {noise:.3f} in ln)", details,
                        part="speed")


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm: outputs equal across every cycle, speed back; speculating arms: acceptance back. A change base
    shows after the same cycle FAILs base (the engine's) and is WARN on the other arms."""
    out = []
    base = view.base
    base_row = _outputs(view, base) if base is not None else None
    table = ((base_row.details or {}).get("table") or []) if base_row is not None else []
    base_changed = frozenset((r["op"], r["probe"]) for r in table if r["verdict"] == FAIL)
    for arm in view.arms:
        is_base = base is not None and arm.id == base.id
        out.append(base_row if is_base and base_row is not None else _outputs(view, arm, base_changed))
        if view.role(arm) in SPECULATING:
            out.append(_acceptance(view, arm))
        out.append(_speed(view, arm))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Engine lifecycle (reset, sleep/wake, pause, reload)",
    catches="a drafter or cache left broken after sleep/wake, a cache reset or a weight reload",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("wake_broken_drafter",),
    profile="deep",
    options={"part": PART, "max_tokens": MAX_TOKENS, "ops": [op.name for op in OPS], "z_drop": Z_DROP},
)
