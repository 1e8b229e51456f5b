"""Channel ``seeds``: at temperature > 0 a per-request seed reproduces, and n > 1 choices still differ.

A user who sends ``seed`` expects the same answer twice. A spec arm draws
more random numbers than base (acceptance uniforms, recovered tokens) and
they must come from the request's seeded generator too; a sampler that
takes them from the process's generator leaves greedy output and the
sampled distribution exact, and breaks reproducibility (docs/channels.md,
section ``seeds``).

Plan: `PROMPTS` chat prompts at temperature `TEMPERATURE`, `MAX_TOKENS`
tokens, each with its own fixed seed (the same on every arm: here equal
seeds are the point). Two probes per prompt: ``repeat`` (sent `COPIES`
times, one after another, non-streamed) and ``n`` (sent once with ``n`` =
`N` and the same seed; vLLM gives choice i the seed + i,
``vllm.v1.engine.parallel_sampling``).

Judge: ``seeds:reproduce`` -- every copy of a repeat probe must have the
same token ids as the first. A spec arm that does not FAILs where base
reproduces (WARN where base does not: not attributable); base that does not
FAILs on base. ``seeds:n`` -- the N choices of an n probe must not all
coincide where base's differ; where base's own coincide it is not
measurable (SKIP).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import httpx

from observatory.channels import Channel
from observatory.client.answer import Response, finish, take_whole
from observatory.client.send import REQUEST_FAILURES, request_body, request_params
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, INVALID, JUDGED_AGAINST_BASE, PASS, SKIP, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.client.send import EngineClient
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "seeds"
TEMPERATURE = 0.8
MAX_TOKENS = 16
COPIES = 2  # sends of each repeat probe
N = 4  # choices of each n probe
SEED0 = 28_004
# Prompts outside the bundled model's training tasks, where it is unsure and draws vary (as in `sampling`).
PROMPTS: tuple[tuple[str, str], ...] = (
    ("poem", "Write a poem about autumn leaves."),
    ("city", "Describe your favourite city."),
)
REPEAT, MANY = "repeat", "n"


def plan(suite: list[Probe]) -> list[Probe]:
    """A repeat probe and an n probe per prompt, each with its own fixed seed (the suite is not used)."""
    out: list[Probe] = []
    for i, (key, text) in enumerate(PROMPTS):
        sampling = {"temperature": TEMPERATURE, "seed": SEED0 + 100 * i}
        msgs = [{"role": "user", "content": text}]
        out.append(Probe(name=f"{NAME}-{key}", category="prose_en", messages=msgs, max_tokens=MAX_TOKENS,
                         channel=NAME, sampling=dict(sampling), meta={"kind": REPEAT, "copies": COPIES}))
        out.append(Probe(name=f"{NAME}-{key}-n", category="prose_en", messages=msgs, max_tokens=MAX_TOKENS,
                         channel=NAME, sampling=dict(sampling), meta={"kind": MANY, "n": N}))
    return out


def run_n(client: EngineClient, probe: Probe, n: int) -> list[Response]:
    """PROBE sent once, non-streamed, with ``n`` = N: one Response per choice (one failed Response on error)."""
    t0 = time.perf_counter()
    try:
        body = request_body(probe, client.served_model(), request_params(probe, client.adapter.name), stream=False)
        body["n"] = n
        path = "/v1/chat/completions" if probe.kind == "chat" else "/v1/completions"
        r = client.fetch(path, client.timeout, body)
        if r.status_code != 200:
            return [finish(Response(error=f"HTTP {r.status_code} from {path}: {r.text[:300]}", error_kind="http"), t0)]
        obj = r.json()
        outs = []
        for choice in sorted(obj["choices"], key=lambda c: int(c.get("index", 0))):
            out = Response()
            take_whole(out, {"choices": [choice], "usage": obj.get("usage")}, probe.kind == "chat", client.take)
            outs.append(finish(out, t0))
        return outs or [finish(Response(error="the server answered no choices", error_kind="malformed"), t0)]
    except httpx.HTTPError as e:
        return [finish(Response(error=f"malformed response: {type(e).__name__}: {e}", error_kind="malformed"), t0)]
    except REQUEST_FAILURES as e:  # an answer the engine's reader refuses (no ids where its adapter reads them): stored, not raised
        return [finish(client.failed(e), t0)]


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Repeat probes sent COPIES times one after another; n probes once with n choices (each choice stored)."""
    assert run.client is not None
    client = run.client
    for probe in probes:
        if probe.meta.get("kind") == MANY:
            for i, resp in enumerate(run_n(client, probe, int(probe.meta.get("n", N)))):
                run.store_result(probe, resp, NAME, repeat=i)
                run.check_alive(resp)
        else:
            for i in range(int(probe.meta.get("copies", COPIES))):
                resp = client.run(replace(probe), stream=False)
                run.store_result(probe, resp, NAME, repeat=i)
                run.check_alive(resp)
        if not run.live:
            return


def _outputs(view: ChannelView, arm: StoredArm, kind: str) -> dict[str, list[StoredResult]]:
    """probe name -> ARM's results of that kind, in repeat order."""
    out: dict[str, list[StoredResult]] = {}
    for r in view.results(arm):
        p = view.probe(r)
        if p.meta.get("kind", REPEAT) == kind:
            out.setdefault(p.name, []).append(r)
    return {k: sorted(v, key=lambda r: r.repeat) for k, v in out.items()}


def _failed(results: dict[str, list[StoredResult]]) -> str | None:
    for name, rs in results.items():
        for r in rs:
            if not r.ok:
                return f"{name}: {r.error}"
    return None


def reproduces(rs: list[StoredResult]) -> tuple[bool, int]:
    """Whether every copy has the first's token ids, and where the first differing copy parts from it."""
    first = rs[0].token_ids or []
    for r in rs[1:]:
        ids = r.token_ids or []
        if ids != first:
            return False, next((i for i, (a, b) in enumerate(zip(first, ids)) if a != b), min(len(first), len(ids)))
    return True, -1


def distinct(rs: list[StoredResult]) -> int:
    """How many different token sequences the choices hold."""
    return len({tuple(r.token_ids or []) for r in rs})


NOT_MEASURED = "not measured: the arm answered none of these requests (it stopped before this phase)"


def _judge_reproduce(view: ChannelView, base: StoredArm, arms: list[StoredArm]) -> list[Verdict]:
    out: list[Verdict] = []
    base_res = _outputs(view, base, REPEAT)
    if not base_res:
        return out
    why = _failed(base_res)
    if why is not None:
        return [view.verdict(base, INVALID, f"base's seeded requests failed: {why}", part="reproduce")]
    base_ok = {name: reproduces(rs)[0] for name, rs in base_res.items()}
    for arm in [base, *arms]:
        res = base_res if arm is base else _outputs(view, arm, REPEAT)
        table = []
        bad: list[str] = []
        for name, rs in sorted(res.items()):
            same, at = reproduces(rs)
            table.append({"probe": name, "copies": len(rs), "seed": view.probe(rs[0]).sampling.get("seed"),
                          "reproduces": "yes" if same else f"no: differs from token {at}",
                          "base reproduces": "yes" if base_ok.get(name) else "no"})
            if not same:
                bad.append(name)
        details = {"table": table, "temperature": TEMPERATURE}
        fail_why = _failed(res) if arm is not base else None
        if not res:  # the arm stopped (or was interrupted) before this phase: nothing to judge, never a PASS
            out.append(view.verdict(arm, SKIP, NOT_MEASURED, details, part="reproduce"))
        elif fail_why is not None:
            out.append(view.verdict(arm, INVALID, f"seeded requests failed: {fail_why}", details, part="reproduce"))
        elif not bad:
            out.append(view.verdict(arm, PASS, f"every seeded request gave the same output on each of its copies "
                                    f"({len(res)} prompts, temperature {TEMPERATURE})", details, part="reproduce"))
        elif arm is base:
            out.append(view.verdict(arm, FAIL, f"base gives a seeded request different outputs: {', '.join(bad)} "
                                    "(the engine's own seeding does not reproduce)", details, part="reproduce"))
        elif any(not base_ok.get(name, False) for name in bad):
            out.append(view.verdict(arm, WARN, f"seeded requests do not reproduce ({', '.join(bad)}), nor do "
                                    "base's: not attributable", details, part="reproduce"))
        else:
            out.append(view.verdict(arm, FAIL, f"the same seeded request twice gave different outputs "
                                    f"({', '.join(bad)}) where base's reproduce: the seed does not hold under "
                                    "speculation", details, part="reproduce"))
    return out


def _judge_n(view: ChannelView, base: StoredArm, arms: list[StoredArm]) -> list[Verdict]:
    out: list[Verdict] = []
    base_res = _outputs(view, base, MANY)
    if not base_res:
        return out
    why = _failed(base_res)
    if why is not None:
        return [view.verdict(base, INVALID, f"base's n > 1 requests failed: {why}", part="n")]
    base_distinct = {name: distinct(rs) for name, rs in base_res.items()}
    measurable = [name for name, k in base_distinct.items() if k > 1]
    for arm in [base, *arms]:
        res = base_res if arm is base else _outputs(view, arm, MANY)
        table = [{"probe": name, "choices": len(rs), "distinct": distinct(rs), "base distinct": base_distinct.get(name)}
                 for name, rs in sorted(res.items())]
        details = {"table": table}
        fail_why = _failed(res) if arm is not base else None
        if not res:
            out.append(view.verdict(arm, SKIP, NOT_MEASURED, details, part="n"))
        elif not measurable:
            out.append(view.verdict(arm, SKIP, "not measurable: base's own n choices coincide on every prompt",
                                    details, part="n"))
        elif fail_why is not None:
            out.append(view.verdict(arm, INVALID, f"n > 1 requests failed: {fail_why}", details, part="n"))
        else:
            same = [name for name in measurable if name in res and distinct(res[name]) < 2]
            if same:
                out.append(view.verdict(arm, FAIL, f"the n choices of one request are all the same ({', '.join(same)}) "
                                        "where base's differ", details, part="n"))
            else:
                out.append(view.verdict(arm, PASS, f"the n choices differ from each other as base's do "
                                        f"({len(measurable)} prompts)", details, part="n"))
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """``seeds:reproduce`` and ``seeds:n`` for every arm (base included)."""
    base = view.base
    if base is None:
        return []
    arms = [a for a in view.arms if a.id != base.id and view.role(a) in JUDGED_AGAINST_BASE]
    return [*_judge_reproduce(view, base, arms), *_judge_n(view, base, arms)]


CHANNEL = Channel(
    name=NAME,
    title="Seeded sampling reproduces",
    catches="a seeded request that no longer reproduces at temperature > 0 under speculation",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("seed_ignored", "n_seed_shared"),
    options={"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS, "copies": COPIES, "n": N,
             "prompts": len(PROMPTS)},
)
