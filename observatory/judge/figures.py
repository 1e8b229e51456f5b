"""Acceptance, speed, the cost of a spec step, and arm validity (docs/design.md sections 2 and 4).

All figures derive from stored rows, so they can be recomputed at any time:

- acceptance from the spec counter deltas read around each streamed probe
  (per probe and per category) and around each timed batch (added into the
  arm's totals):
  alpha = accepted / draft_tokens, tau = 1 + accepted / drafts,
  p_j = accepted_at_pos_j / drafts, P(n = j) = p_j - p_(j+1), P(n = 0) = 1 - p_1;
- speed (observatory/judge/speed.py) from the timed single-stream runs (warm-up
  excluded), tokens from ``usage.completion_tokens``: TTFT, inter-token
  latency, end-to-end and decode tok/s (not measurable on a bursty stream),
  and aggregate throughput per concurrency level;
- per concurrency level: alpha and tau (the counter deltas of its timed
  batches), median TTFT, throughput and S against base at the same level;
- against the base arm of the same session: S = single-stream tok/s(spec) /
  single-stream tok/s(base) (end to end: a TTFT bought for decode speed counts),
  r = tau / S (one spec step in base steps), c = r - 1, pays while tau > r;
  for k = 1 the break-even alpha > c; a bootstrap CI on S, and from it how precise
  S is (observatory/judge/precision.py: the smallest detectable change, the
  timed traffic spent and the traffic a +-2% interval would need);
- the performance checks of each spec arm (observatory/judge/perf_gates.py):
  speedup, TTFT ratio, acceptance floor, tau from the stream against tau from
  the counters, ids against usage;
- whether the speed figures can be trusted (issue 29 items 3-4): ``steady_state``
  (the warm-up still in the timed requests, left out of the single-stream
  figures and of S on both sides: observatory/judge/steady_state.py),
  ``gpu_clocks`` (the clocks beside each timed block: observatory/engines/gpu_clocks.py),
  ``cuda_graphs`` (the timed steps against the captured graphs:
  observatory/judge/graph_coverage.py);
- the A/A noise floor from copies of the base arm;
- validity codes: INVALID, CONFOUNDED, LOSSY, LOW_N, CRASHED, HUNG, CROSS_SESSION (an arm
  that ran apart from base: resumed later or elsewhere), UNCHECKED (what a URL
  arm's server does not expose to compare), CONCURRENT, ENGINE_CHOSEN (a cache setting no flag
  sets that the engine chose differently for the spec arm: not a confound).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np

from observatory.client.answer import MALFORMED
from observatory.engines.adapter import adapter_for
from observatory.engines.argv_flags import flag_pairs
from observatory.engines.gpu_clocks import drift
from observatory.engines.host_load import busy_share
from observatory.engines.images import image_differences, split_docker_argv
from observatory.engines.lossy_knobs import lossy_settings
from observatory.engines.metrics import SpecCounters, impossible
from observatory.engines.server_facts import cache_differences, served_differences
from observatory.judge import bracketed
from observatory.judge.apply_gates import base_reference
from observatory.judge.graph_coverage import coverage
from observatory.judge.latency import latency
from observatory.judge.paired import paired_vs_base, pairs, sides
from observatory.judge.perf_gates import not_lossless, performance
from observatory.judge.precision import precision, spent
from observatory.judge.ran_together import cross_session
from observatory.judge.speed import speed, stream_tau, ttft_by_level
from observatory.judge.steady_state import excluded_keys, steady_state
from observatory.judge.step_time import step_speedup
from observatory.model.env_vars import FAULT_KNOBS
from observatory.model.errors import NOT_REPORTED
from observatory.model.numerics import served_platform
from observatory.model.roles import by_engine
from observatory.model.vocabulary import BRACKET_BASE, INVALID, INVALID_CODES, PAIRED_BASE
from observatory.store.db import ArmRow
from observatory.store.session_store import Store

MIN_DRAFTS = 200
BOOTSTRAP_SAMPLES = 2000
# argv flags whose values legitimately differ between arms of one session
_IGNORED_FLAGS = {"--port", "--speculative-config"}
# the plugin switches change speculative steps only (a fault, or the repair of an engine bug, see
# observatory.faults): they are the arm's treatment, shown with it, not a confound of the launch
_IGNORED_ENV = {"OBSERVATORY_FAULT", "OBSERVATORY_REPAIR", "CUDA_VISIBLE_DEVICES"}


def acceptance(c: SpecCounters, k: int | None = None) -> dict[str, Any]:
    """alpha, tau, per-position acceptance and the accepted-per-draft histogram.

    The one acceptance formula. Each figure is None (lists empty) unless every
    counter it needs was reported and usable: a counter the engine does not
    report is None, never 0 (issue 13 item 8), and unusable counters (`problem`)
    give no figures at all (issue 19 item 1), nor do counters that break an
    invariant (`metrics.impossible`: alpha > 1, a position >= K; issue 32 item 2).
    """
    per_pos = None if c.accepted_per_pos is None else list(c.accepted_per_pos)
    problem = c.problem or "; ".join(impossible(c, k)) or None
    out: dict[str, Any] = {"drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                           "accepted_per_pos": per_pos, "problem": problem,
                           "reported_tau": getattr(c, "reported_tau", None),
                           "alpha": None, "tau": None, "per_position": [], "histogram": []}
    if problem is not None:
        return out
    missing = [f for f in ("drafts", "draft_tokens", "accepted", "accepted_per_pos") if getattr(c, f) is None]
    if missing:
        out["not_reported"] = f"{', '.join(missing)}: {NOT_REPORTED}"
    if c.accepted is not None and c.draft_tokens:
        out["alpha"] = c.accepted / c.draft_tokens
    if not c.drafts or c.drafts <= 0:
        return out
    if c.accepted is not None:
        out["tau"] = 1.0 + c.accepted / c.drafts
    if per_pos:
        p = [a / c.drafts for a in per_pos]
        out["per_position"] = p
        # P(n = j): exactly j of the k drafted tokens accepted (prefix acceptance).
        full = [1.0, *p, 0.0]
        out["histogram"] = [full[j] - full[j + 1] for j in range(len(p) + 1)]
    return out


def _bootstrap_ratio(spec: list[list[float]], base: list[list[float]], seed: int = 0) -> list[float] | None:
    """95% CI of tok/s(spec)/tok/s(base), resampling [tokens, seconds] requests of each arm."""
    if len(spec) < 2 or len(base) < 2:
        return None
    rng = np.random.default_rng(seed)
    s = np.asarray(spec, dtype=float)
    b = np.asarray(base, dtype=float)
    si = rng.integers(0, len(s), size=(BOOTSTRAP_SAMPLES, len(s)))
    bi = rng.integers(0, len(b), size=(BOOTSTRAP_SAMPLES, len(b)))
    rs = s[si, 0].sum(1) / s[si, 1].sum(1)
    rb = b[bi, 0].sum(1) / b[bi, 1].sum(1)
    ratio = rs / rb
    return [float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))]


def vs_base(acc: dict[str, Any], spd: dict[str, Any], base_spd: dict[str, Any], k: int | None) -> dict[str, Any]:
    """S, r, c and the break-even against the base arm (S from the end-to-end single-stream rates).

    With S's interval, how precise S is (observatory.judge.precision): ``detectable_change``,
    ``timed_requests``, ``timed_s`` and ``traffic_for`` a +-2% interval (None where not measurable).
    """
    out: dict[str, Any] = {"S": None, "r": None, "c": None, "ci": None, "pays": None, "statement": None,
                           "break_even_alpha": None, **precision(None, None, None, None)}
    sb, ss = base_spd.get("single_stream_tok_s"), spd.get("single_stream_tok_s")
    if not sb or not ss:
        return out
    S = ss / sb
    out["S"] = S
    out["ci"] = _bootstrap_ratio(spd["samples"], base_spd["samples"])
    out.update(precision(S, out["ci"], spent(spd.get("samples")), spent(base_spd.get("samples"))))
    out.update(step_cost(S, acc.get("tau"), k))
    return out


def unlike_passes(acc: dict[str, Any], k: int | None, untimed: str) -> dict[str, Any]:
    """`vs_base` with no S where one side has no timed pass (an arm that crashed before it): its figure would
    come from its correctness pass (logprobs on, answers whole where the engine needs them) against the other's
    timed pass, two different requests; "not measurable", never a ratio of unlike things."""
    return {**vs_base(acc, {}, {}, k),
            "not_measurable": f"S: {untimed} has no timed pass (its speed would come from its correctness pass)"}


def step_cost(S: float | None, tau: float | None, k: int | None) -> dict[str, Any]:
    """r = tau / S (one spec step in base steps), c = r - 1, whether it pays, its statement, k = 1's break-even."""
    if S is None or tau is None:
        return {"r": None, "c": None, "pays": None, "statement": None, "break_even_alpha": None}
    r = tau / S
    return {"r": r, "c": r - 1.0, "pays": tau > r,
            "statement": (f"one spec step costs {r:.2f} base steps; accepting tau = {tau:.2f} tokens per step "
                          f"{'pays' if tau > r else 'does not pay'} (needs tau > r)"),
            # S = (1 + alpha) / (1 + c) for k = 1: speculation pays while alpha > c.
            "break_even_alpha": r - 1.0 if k == 1 else None}


def with_pairs(vb: dict[str, Any], paired: dict[str, Any], tau: float | None, k: int | None) -> dict[str, Any]:
    """VB with S, its interval and precision from the arm's pairs (--timing paired); the S of the arm's own
    timing against base's separate block kept as ``unpaired`` beside it."""
    pv = paired_vs_base(paired)
    out = {**vb, "unpaired": {"S": vb.get("S"), "ci": vb.get("ci")}, **pv}
    mine, theirs = sides(paired)
    out.update(precision(pv["S"], pv["ci"], spent(mine), spent(theirs)))
    out.update(step_cost(pv["S"], tau, k))
    return out


def with_brackets(vb: dict[str, Any], br: dict[str, Any], tau: float | None, k: int | None) -> dict[str, Any]:
    """VB with S, its drift-corrected interval, the host's drift and precision from the arm's bracketed timing
    (--timing bracketed, observatory.judge.bracketed); the S of the arm's own timing against base's separate
    block kept as ``unbracketed`` beside it."""
    bv = bracketed.bracketed_vs_base(br)
    out = {**vb, "unbracketed": {"S": vb.get("S"), "ci": vb.get("ci")}, **bv}
    mine, theirs = bracketed.sides(br)
    out.update(precision(bv["S"], bv["ci"], spent(mine), spent(theirs)))
    out.update(step_cost(bv["S"], tau, k))
    return out


def launch_differences(arm: ArmRow, base: ArmRow) -> list[str]:
    """Differences between two arms' launch configs other than speculation."""
    a, b = arm.launch or {}, base.launch or {}
    if a.get("url") or b.get("url"):
        return []
    # docker hook (observatory.engines.images): compare the engine's own flags, never
    # docker's options; the images themselves by their rules
    diffs = image_differences(a, b)
    adapter = adapter_for(arm.engine)
    spec_flags = adapter.speculation_flags  # the arm's speculation itself, on its engine
    ignored = _IGNORED_FLAGS | set(adapter.spec_only_flags)  # switches a spec arm alone may carry (no output change)
    # a chunked-stream control's interval is its treatment (channel stream_fields), shown with it, not a confound
    treated = {getattr(adapter, "stream_interval_flag", None)} if a.get("stream_interval") else set()
    fa, fb = _flags(split_docker_argv(a.get("argv", []))[2]), _flags(split_docker_argv(b.get("argv", []))[2])
    for k in sorted(set(fa) | set(fb)):
        if k in ignored or k in treated or (spec_flags and k.startswith(spec_flags)) or fa.get(k) == fb.get(k):
            continue
        diffs.append(f"{k}: {_show(fb.get(k))} on base, {_show(fa.get(k))} here")
    ea, eb = a.get("env", {}), b.get("env", {})
    declared = set(str(a.get("fault") or "").replace(",", "+").split("+")) - {""}  # its fault's knobs are the fault's
    for k in sorted(set(ea) | set(eb)):
        if k in _IGNORED_ENV or ea.get(k) == eb.get(k) or FAULT_KNOBS.get(k) in declared:
            continue
        diffs.append(f"env {k}: {_show(eb.get(k))} on base, {_show(ea.get(k))} here")
    return diffs


# cache settings an engine derives from the model and the speculative config when no flag sets them
# (H200, vLLM 0.26, the Qwen3.5-style hybrid: block_size 272 on base, 288 with MTP)
_DERIVED_CACHE = {"block_size": "--block-size"}


def _engine_chosen(diffs: list[str] | None, arm: ArmRow, base: ArmRow) -> tuple[list[str], list[str]]:
    """Split launched arms' cache differences into confounds and values the engine chose itself."""
    if not diffs:
        return [], []
    flags = [set(_flags(split_docker_argv((a.launch or {}).get("argv", []))[2])) for a in (arm, base)]
    chosen = {key for key, flag in _DERIVED_CACHE.items() if not any(flag in f for f in flags)}
    derived = [d for d in diffs if d.split(":")[0].removeprefix("cache ") in chosen]
    return [d for d in diffs if d not in derived], derived


def _show(v: Any) -> str:
    return "absent" if v is None else ("set" if v is True else repr(v))


def _flags(argv: list[str]) -> dict[str, Any]:
    """argv -> {flag: value or True}, the program and module ignored (`observatory.engines.argv_flags`)."""
    return {key: True if val is None else val for key, val in flag_pairs(argv)}


def cudagraph_gap(arm: ArmRow) -> str | None:
    """A CUDA-graph capture list that leaves out batch size 1 (docs/design.md mistake 7)."""
    flags = _flags((arm.launch or {}).get("argv", []))
    sizes: Any = None
    if "--cuda-graph-sizes" in flags:
        sizes = str(flags["--cuda-graph-sizes"]).replace(",", " ").split()
    for key in ("--compilation-config", "-O"):
        if key in flags:
            try:
                sizes = json.loads(flags[key]).get("cudagraph_capture_sizes", sizes)
            except (ValueError, AttributeError):
                pass
    if sizes and "1" not in [str(s) for s in sizes]:
        return f"CUDA-graph capture sizes {sizes} leave out batch size 1 (single-stream runs uncaptured)"
    return None


def validity(arm: ArmRow, base: ArmRow | None, acc: dict[str, Any], arm_verdicts: dict[str, tuple[str, str]],
             arms: list[ArmRow] | None = None, malformed: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Why this arm's figures cannot be trusted, if they cannot (ARMS: the session's, for CROSS_SESSION).

    MALFORMED: the arm's answers with a field out of range (`malformed_answers`).
    """
    out = []
    launch = arm.launch or {}
    if arm.status in ("crashed", "hung"):
        out.append({"code": arm.status.upper(), "detail": arm.reason or ""})
    elif arm.status in ("failed", "interrupted"):
        out.append({"code": INVALID, "detail": f"arm {arm.status}: {arm.reason or ''}"})
    is_spec = launch.get("speculative_config") is not None
    ran = arm.status == "ok"
    drafts = acc["drafts"]
    if malformed:
        out.append({"code": INVALID, "detail": f"{malformed['answers']} malformed answer(s) from the server, "
                    f"e.g. {malformed['first']}"})
    if ran and acc.get("problem"):
        out.append({"code": INVALID, "detail": f"engine counters unusable: {acc['problem']}"})
    elif ran and is_spec and drafts is None:
        out.append({"code": INVALID,
                    "detail": "speculation not provable: the engine does not report draft counters"})
    elif ran and is_spec and not drafts:
        out.append({"code": INVALID, "detail": "speculation inactive: the draft counters did not move"})
    if is_spec:
        out += _lossy(arm, launch)
    if ran and not is_spec and drafts:
        out.append({"code": INVALID, "detail": f"a non-speculating arm moved the draft counters ({drafts} drafts)"})
    if ran and is_spec and drafts is not None and 0 < drafts < MIN_DRAFTS:
        out.append({"code": "LOW_N", "detail": f"{acc['drafts']} drafts < {MIN_DRAFTS}: acceptance figures are noisy"})
    for gate, (verdict, reason) in arm_verdicts.items():
        if verdict == INVALID:  # an invalidating arm gate failed (observatory.judge.apply_gates)
            out.append({"code": INVALID, "detail": f"{gate}: {reason}"})
    if base is not None and arm is not base:
        diffs = launch_differences(arm, base)
        if diffs:
            out.append({"code": "CONFOUNDED", "detail": "differs from base in more than speculation: " + "; ".join(diffs)})
        if not (launch.get("url") or (base.launch or {}).get("url")):
            # launched arms: the same flags may still be served differently (prefix caching is the
            # engine's default unless a flag says otherwise), so compare what the servers report
            cache, chosen = _engine_chosen(cache_differences(arm, base), arm, base)
            if cache:
                out.append({"code": "CONFOUNDED", "detail": "the servers differ in more than speculation: "
                            + "; ".join(cache)})
            if chosen:
                out.append({"code": "ENGINE_CHOSEN", "detail": "; ".join(chosen) + " (no flag sets it on either "
                            "arm: the engine chose it for each configuration, and the launches differ only in "
                            "speculation)"})
        if launch.get("url") or (base.launch or {}).get("url"):
            served, unchecked = served_differences(arm, base)
            if served:
                out.append({"code": "CONFOUNDED", "detail": "the servers differ in more than speculation: "
                            + "; ".join(served)})
            out.append({"code": "UNCHECKED", "detail": "not compared with base (URL arm): launch flags and "
                        "environment" + "".join(f", {u} (not reported)" for u in unchecked)})
        apart = cross_session(arm, base, arms or [])
        if apart:
            out.append({"code": "CROSS_SESSION", "detail": apart + ": figures against base are cross-session"})
    if launch.get("timing") == "concurrent" and launch.get("concurrent_with"):
        out.append({"code": "CONCURRENT", "detail": "timed while " + ", ".join(launch["concurrent_with"])
                    + " ran on the same host: throughput figures are not comparable (use --timing sequential)"})
    gap = cudagraph_gap(arm)
    if gap and not is_spec:
        out.append({"code": "CONFOUNDED", "detail": gap + " on the base arm: speedups against it are inflated"})
    return out


def _lossy(arm: ArmRow, launch: dict[str, Any]) -> list[dict[str, str]]:
    """LOSSY for each setting that loosens the spec arm's verification (`observatory.engines.lossy_knobs`).

    A URL arm's own command line and environment are the server's, unseen here: only its declared
    speculative config is checked, and an UNCHECKED note says so.
    """
    out = [{"code": "LOSSY", "detail": "verification loosened by configuration: " + s
            + ": its speed and acceptance are not a lossless result"}
           for s in lossy_settings(arm.engine, launch)]
    if launch.get("url"):
        reported = sorted((launch.get("served") or {}).get("server_args") or {})
        flags = ("the flags its server reports checked (" + ", ".join(reported) + "), the other flags"
                 if reported else "the server's launch flags")
        out.append({"code": "UNCHECKED", "detail": f"lossy-by-configuration settings: {flags} and environment "
                    "not checked (URL arm: the server does not report them); its speculative config as declared "
                    "checked"})
    return out


def spec_k(arm: ArmRow) -> int | None:
    """The arm's draft length k (num_speculative_tokens); None without speculation or when unknown."""
    spec = (arm.launch or {}).get("speculative_config")
    k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None


def _allowed_per_chunk(arm: ArmRow) -> int | None:
    """Most tokens one streamed chunk may carry: 1 without speculation, k + 1 with it (None: k unknown); a
    chunked-stream control's interval (``stream_interval``) where it has one."""
    interval = (arm.launch or {}).get("stream_interval")
    least = interval if isinstance(interval, int) and interval > 1 else 1
    if (arm.launch or {}).get("speculative_config") is None:
        return least
    k = spec_k(arm)
    return max(k + 1, least) if k is not None else None


def malformed_answers(results: list[Any]) -> dict[str, Any] | None:
    """How many RESULTS the server answered with a field out of range (observatory.client.answer), and the first error."""
    bad = [r.error for r in results if not r.ok and (r.error or "").startswith(MALFORMED)]
    return {"answers": len(bad), "first": bad[0][:300]} if bad else None


def _arm_figures(store: Store, a: ArmRow, probes: dict[int, Any], singles: dict[int, list[Any]] | None = None
                 ) -> dict[str, Any]:
    """Acceptance (overall, per category, per probe, per concurrency level) and speed of one arm."""
    stream = [r for r in store.results(a.id, "stream") if r.ok]
    k = spec_k(a)
    total = SpecCounters()
    by_cat: dict[str, SpecCounters] = defaultdict(SpecCounters)
    by_probe: dict[str, Any] = {}
    for r in stream:
        d = SpecCounters.from_dict(r.counters_delta)
        total = total + d
        cat = probes[r.probe_id].category if r.probe_id in probes else "?"
        by_cat[cat] = by_cat[cat] + d
        by_probe[probes[r.probe_id].name] = acceptance(d, k)
    measurements = store.measurements(a.id)
    timed_total = SpecCounters()
    by_level: dict[int, SpecCounters] = defaultdict(SpecCounters)
    for m in measurements:
        d = SpecCounters.from_dict(m.counters_delta)
        timed_total = timed_total + d
        by_level[int(m.concurrency)] = by_level[int(m.concurrency)] + d
    # The arm's figures count every measured request: the streamed probes
    # (read one by one) and the timed runs (read around each batch).
    acc = acceptance(total + timed_total, k)
    if acc["accepted"] is None and total.accepted is not None and total.drafts:
        # an engine whose /metrics counts no accepted tokens (verify steps only) reports them per
        # request in its answers, which only the probe pass reads (observatory.session.measure): counted there
        acc = {**acceptance(total, k), "counted": "the probe pass only: the engine reports no accepted tokens "
               "for the timed passes (its /metrics counts verify steps only; each answer's own counters are "
               "read where the answer is kept)"}
    acc["from"] = {"stream": total.to_dict(), "timed": timed_total.to_dict()}
    acc["by_category"] = {cat: acceptance(v, k) for cat, v in sorted(by_cat.items())}
    acc["by_probe"] = by_probe
    timed = [r for r in store.results(a.id, "timed") if r.ok]
    single = [r for r in timed if r.concurrency == 1]
    # warm-up still in the timed requests (observatory.judge.steady_state): left out of the single-stream figures
    steady = steady_state(single) if single else None
    warm = excluded_keys(steady)
    steady_single = [r for r in single if (r.probe_id, r.repeat) not in warm]
    if singles is not None:
        singles[a.id] = single
    spd = speed(steady_single or stream, timed, measurements, _allowed_per_chunk(a), streamed=stream)
    # TTFT, TPOT, ITL, E2EL percentiles per concurrency level, as vllm bench serve reports them (issue 50 item 5)
    spd["latency"] = latency(timed, _allowed_per_chunk(a), spd.get("bursty"), warm)
    ttft = ttft_by_level(timed)
    at_level = {level: acceptance(v, k) for level, v in sorted(by_level.items())}
    levels = {str(lv): {"alpha": la["alpha"], "tau": la["tau"], "drafts": la["drafts"],
                        "draft_tokens": la["draft_tokens"], "accepted": la["accepted"],
                        "ttft_ms": ttft.get(str(lv)), "tok_s": (spd["throughput"].get(str(lv)) or {}).get("tok_s"),
                        "S": None} for lv, la in at_level.items()}
    fig: dict[str, Any] = {"acceptance": acc, "speed": spd, "by_concurrency": levels,
                           "malformed": malformed_answers([r for r in store.results(a.id) if r.mode not in BESIDE_MODES]),
                           "steady_state": steady, "gpu_clocks": gpu_clocks(measurements),
                           # the host's CPU that other work took while this arm's single stream was timed
                           "host_foreign_share": busy_share([(m.gpu or {}).get("host") for m in measurements
                                                             if int(m.concurrency) == 1]),
                           "cuda_graphs": coverage(a, sorted({int(m.concurrency) for m in measurements}))}
    if (a.launch or {}).get("speculative_config") is not None:
        fig["stream_tau"] = stream_tau(stream)
        fig["stream_counter_tau"] = acceptance(total, k)["tau"]
        paired = pairs(timed, store.results(a.id, PAIRED_BASE), warm)  # --timing paired (observatory.judge.paired)
        if paired is not None:
            fig["paired"] = paired
        # --timing bracketed (observatory.judge.bracketed)
        around = bracketed.brackets(timed, store.results(a.id, BRACKET_BASE), warm)
        if around is not None:
            fig["bracketed"] = around
    return fig


# modes of base's requests stored on a spec arm (timed beside it): base's answers, not this arm's
BESIDE_MODES = (PAIRED_BASE, BRACKET_BASE)


def compute_figures(store: Store, session_id: int) -> dict[int, dict[str, Any]]:
    """Compute and store figures, performance checks and validity for every arm of a session."""
    arms = store.arms(session_id)
    probes = {p.id: p for p in store.probes(session_id)}
    fail_on = dict((store.session(session_id).options or {}).get("fail_on") or {})
    singles: dict[int, list[Any]] = {}  # each arm's single-stream timed results, warm-up included
    per_arm = {a.id: _arm_figures(store, a, probes, singles) for a in arms}
    for group in by_engine(arms):  # each engine's arms against their own engine's base
        _group_figures(store, arms, group, per_arm, fail_on, singles)
    return per_arm


def gpu_clocks(measurements: list[Any]) -> dict[str, Any]:
    """The GPU clocks beside each timed block (observatory.engines.gpu_clocks.drift), and whether any moved."""
    blocks = [{"concurrency": int(m.concurrency), "repeat": int(m.repeat), **drift(getattr(m, "gpu", None))}
              for m in measurements]
    read = [b for b in blocks if b["measurable"]]
    if not read:
        why = blocks[0]["why"] if blocks else "not measurable: no timed block"
        return {"measurable": False, "why": why, "moved": None, "blocks": blocks}
    return {"measurable": True, "moved": any(b.get("moved") for b in read), "blocks": blocks}


def _common_speed(spd: dict[str, Any], single: list[Any], drop: set[tuple[int, int]]) -> dict[str, Any]:
    """SPD, or the single-stream figures S needs of SINGLE without the (probe, repeat) keys DROP, when DROP
    leaves out more than this arm's own warm-up did (S compares the same requests on both sides)."""
    kept = [r for r in single if (r.probe_id, r.repeat) not in drop]
    return speed(kept) if kept and len(kept) != spd.get("requests") else spd


def _group_figures(store: Store, arms: list[ArmRow], group: list[ArmRow], per_arm: dict[int, dict[str, Any]],
                   fail_on: dict[str, Any], singles: dict[int, list[Any]] | None = None) -> None:
    """Figures against base, performance checks and validity for one engine's arms (GROUP) of the session."""
    base = base_reference(group)
    base_fig = per_arm.get(base.id) if base else None
    copies = [a for a in group if base and (a.launch or {}).get("copy_of") == base.name]
    floor = noise_floor(store, base, copies, per_arm) if base else None
    for a in group:
        fig = per_arm[a.id]
        spec = (a.launch or {}).get("speculative_config")
        apart = cross_session(a, base, arms) if base is not None else None
        if spec is not None and base_fig is not None:
            k = spec.get("num_speculative_tokens")
            # warm-up left out on either side is left out of both (observatory.judge.steady_state)
            drop = excluded_keys(fig.get("steady_state")) | excluded_keys(base_fig.get("steady_state"))
            spd_s, base_s = fig["speed"], base_fig["speed"]
            if drop and singles is not None and base is not None:
                spd_s = _common_speed(spd_s, singles.get(a.id, []), drop)
                base_s = _common_speed(base_s, singles.get(base.id, []), drop)
            k_int = k if isinstance(k, int) else None
            if singles is not None and base is not None and bool(singles.get(a.id)) != bool(singles.get(base.id)):
                vb = unlike_passes(fig["acceptance"], k_int, a.name if not singles.get(a.id) else base.name)
            else:
                vb = vs_base(fig["acceptance"], spd_s, base_s, k_int)
            vb["warmup_left_out"] = sorted([int(p), int(r)] for p, r in drop)
            if fig.get("paired") is not None:
                vb = with_pairs(vb, fig["paired"], fig["acceptance"].get("tau"), k_int)
                if base is not None and served_platform(base.launch) is None:
                    vb["pairs_share_cores"] = True  # perf_gates._noise: the two engines' threads compete
            if fig.get("bracketed") is not None:
                vb = with_brackets(vb, fig["bracketed"], fig["acceptance"].get("tau"), k_int)
            vb["host_foreign_share"] = fig.get("host_foreign_share")  # perf_gates._noise: a busy host's speed
            # perf_gates.speedup_check: on CPU cores a verify step is compute-bound, S below 1 the platform's
            vb["cpu_served"] = base is not None and served_platform(base.launch) is None \
                and not (base.launch or {}).get("url") and not (a.launch or {}).get("url")
            vb["tau"], vb["k"] = fig["acceptance"].get("tau"), k_int
            if floor and vb["S"] is not None and floor.get("throughput_spread") is not None:
                vb["within_noise"] = abs(vb["S"] - 1.0) <= floor["throughput_spread"]
            vb["cross_session"] = apart
            if singles is not None and base is not None:
                beside = [r for mode in BESIDE_MODES for r in store.results(a.id, mode) if r.ok and r.concurrency == 1]
                vb["step"] = step_speedup(singles.get(a.id, []), singles.get(base.id, []),
                                          fig["acceptance"].get("tau"), beside)
            fig["vs_base"] = vb
            for level, row in fig["by_concurrency"].items():
                b = (base_fig["by_concurrency"].get(level) or {}).get("tok_s")
                row["S"] = row["tok_s"] / b if row["tok_s"] and b else None
        arm_verdicts = {v.gate: (v.verdict, v.reason) for v in store.verdicts(a.id) if v.probe_id is None}
        codes = validity(a, base, fig["acceptance"], arm_verdicts, arms, fig.get("malformed"))
        if spec is not None:
            untrusted = next((v["code"] for v in codes if v["code"] in INVALID_CODES), None)
            fig["performance"] = performance(fig, base_fig, floor, fail_on, untrusted)
            lossy = next((v["detail"] for v in codes if v["code"] == "LOSSY"), None)
            if lossy:
                fig["performance"] = not_lossless(fig["performance"], lossy)
        fig["noise_floor"] = floor
        store.update(ArmRow, a.id, figures=fig, validity=codes)


def noise_floor(store: Store, base: ArmRow, copies: list[ArmRow], per_arm: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """Token-identity rate and throughput spread between base and its A/A copies."""
    if not copies:
        return None
    ref = {r.probe_id: r.token_ids for r in store.results(base.id, "stream") if r.ok}
    same = total = 0
    spreads = []
    sb = per_arm[base.id]["speed"].get("single_stream_tok_s")
    for c in copies:
        for r in store.results(c.id, "stream"):
            if r.ok and r.probe_id in ref:
                total += 1
                same += int(r.token_ids == ref[r.probe_id])
        sc = per_arm[c.id]["speed"].get("single_stream_tok_s")
        if sb and sc:
            spreads.append(abs(sc / sb - 1.0))
    return {
        "copies": [c.name for c in copies],
        "token_identity_rate": same / total if total else None,
        "throughput_spread": max(spreads) if spreads else None,
    }
