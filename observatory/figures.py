"""Acceptance, speed, the cost of a spec step, and arm validity (DESIGN.md sections 2 and 4).

All figures derive from stored rows, so they can be recomputed at any time:

- acceptance from the spec counter deltas read around each streamed probe
  (per probe and per category) and around each timed batch (added into the
  arm's totals):
  alpha = accepted / draft_tokens, tau = 1 + accepted / drafts,
  p_j = accepted_at_pos_j / drafts, P(n = j) = p_j - p_(j+1), P(n = 0) = 1 - p_1;
- speed from the timed single-stream runs (warm-up excluded): TTFT,
  inter-token latency (median, p90, from the chunk timeline), single-stream
  tok/s end to end (tokens / request time), decode-only tok/s
  ((tokens - 1) / (request time - TTFT), as `vllm bench serve` computes TPOT),
  and aggregate throughput per concurrency level;
- against the base arm of the same session: S = single-stream tok/s(spec) /
  single-stream tok/s(base) (end to end: a TTFT bought for decode speed counts),
  r = tau / S (one spec step in base steps), c = r - 1, pays while tau > r;
  for k = 1 the cross-check S = (1 + alpha) / (1 + c); a bootstrap CI on S;
- the A/A noise floor from copies of the base arm;
- validity codes: INVALID, CONFOUNDED, LOW_N, CRASHED, HUNG.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

import numpy as np

from observatory.db import ArmRow, ResultRow
from observatory.images import image_differences, split_docker_argv
from observatory.judge import base_reference
from observatory.metrics import SpecCounters

MIN_DRAFTS = 200
BOOTSTRAP_SAMPLES = 2000
# argv flags whose values legitimately differ between arms of one session
_IGNORED_FLAGS = {"--port", "--speculative-config"}
_IGNORED_ENV = {"OBSERVATORY_FAULT", "CUDA_VISIBLE_DEVICES"}


def acceptance(c: SpecCounters) -> dict[str, Any]:
    """alpha, tau, per-position acceptance and the accepted-per-draft histogram."""
    out: dict[str, Any] = {"drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                           "accepted_per_pos": list(c.accepted_per_pos),
                           "alpha": None, "tau": None, "per_position": [], "histogram": []}
    if c.drafts <= 0:
        return out
    out["alpha"] = c.accepted / c.draft_tokens if c.draft_tokens else None
    out["tau"] = 1.0 + c.accepted / c.drafts
    p = [a / c.drafts for a in c.accepted_per_pos]
    out["per_position"] = p
    # P(n = j): exactly j of the k drafted tokens accepted (prefix acceptance).
    full = [1.0, *p, 0.0]
    out["histogram"] = [full[j] - full[j + 1] for j in range(len(p) + 1)]
    return out


def _decode_rate(r: ResultRow) -> tuple[float, int, float] | None:
    """(decode tok/s, tokens after the first, seconds after the first token) of one result.

    Like `vllm bench serve`'s TPOT: (end - first token) over (tokens - 1), which
    holds however the server groups tokens into chunks.
    """
    n = len(r.token_ids or [])
    if n < 2 or r.ttft_ms is None or r.duration_ms is None:
        return None
    secs = (float(r.duration_ms) - float(r.ttft_ms)) / 1000.0
    if secs <= 0:
        return None
    return (n - 1) / secs, n - 1, secs


def _itl(results: list[ResultRow]) -> list[float]:
    gaps = []
    for r in results:
        ch = r.chunks or []
        for (t0, _), (t1, n) in itertools.pairwise(ch):
            gaps.extend([(float(t1) - float(t0)) / max(int(n), 1)] * max(int(n), 1))
    return gaps


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def speed(single: list[ResultRow], measurements: list[Any]) -> dict[str, Any]:
    """TTFT, ITL, single-stream decode tok/s and throughput per concurrency."""
    rates = [x for x in (_decode_rate(r) for r in single) if x]
    ttft = [float(r.ttft_ms) for r in single if r.ttft_ms is not None]
    itl = _itl(single)
    tokens = sum(t for _, t, _ in rates)
    secs = sum(s for _, _, s in rates)
    # End to end: all tokens over the whole request time (TTFT included).
    e2e = [[len(r.token_ids), float(r.duration_ms) / 1000.0] for r in single
           if r.token_ids and r.duration_ms and r.duration_ms > 0]
    e2e_tokens = sum(t for t, _ in e2e)
    e2e_secs = sum(s for _, s in e2e)
    by_level: dict[int, list[float]] = defaultdict(list)
    for m in measurements:
        if m.wall_s > 0:
            by_level[int(m.concurrency)].append(m.completion_tokens / m.wall_s)
    return {
        "requests": len(single),
        "ttft_ms": {"median": _pct(ttft, 50), "p90": _pct(ttft, 90)},
        "itl_ms": {"median": _pct(itl, 50), "p90": _pct(itl, 90)},
        "single_stream_tok_s": e2e_tokens / e2e_secs if e2e_secs > 0 else None,
        "decode_tok_s": tokens / secs if secs > 0 else None,
        "samples": e2e,
        "throughput": {str(k): {"tok_s": float(np.mean(v)), "repeats": len(v)} for k, v in sorted(by_level.items())},
    }


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
    """S, r, c, break-even and the k=1 cross-check against the base arm."""
    out: dict[str, Any] = {"S": None, "r": None, "c": None, "ci": None, "pays": None, "statement": None,
                           "break_even_alpha": None, "k1_check_S": None}
    sb, ss = base_spd.get("single_stream_tok_s"), spd.get("single_stream_tok_s")
    if not sb or not ss:
        return out
    S = ss / sb
    out["S"] = S
    out["ci"] = _bootstrap_ratio(spd["samples"], base_spd["samples"])
    tau = acc.get("tau")
    if tau is None:
        return out
    r = tau / S
    out.update(r=r, c=r - 1.0, pays=tau > r)
    out["statement"] = (f"one spec step costs {r:.2f} base steps; accepting tau = {tau:.2f} tokens per step "
                        f"{'pays' if tau > r else 'does not pay'} (needs tau > r)")
    if k == 1 and acc.get("alpha") is not None:
        out["break_even_alpha"] = r - 1.0
        out["k1_check_S"] = (1.0 + acc["alpha"]) / r
    return out


def launch_differences(arm: ArmRow, base: ArmRow) -> list[str]:
    """Differences between two arms' launch configs other than speculation."""
    a, b = arm.launch or {}, base.launch or {}
    if a.get("url") or b.get("url"):
        return []
    # docker hook (observatory.images): compare the engine's own flags, never
    # docker's options; the images themselves by their rules
    diffs = image_differences(a, b)
    fa, fb = _flags(split_docker_argv(a.get("argv", []))[2]), _flags(split_docker_argv(b.get("argv", []))[2])
    for k in sorted(set(fa) | set(fb)):
        if k in _IGNORED_FLAGS or fa.get(k) == fb.get(k):
            continue
        diffs.append(f"{k}: {_show(fb.get(k))} on base, {_show(fa.get(k))} here")
    ea, eb = a.get("env", {}), b.get("env", {})
    for k in sorted(set(ea) | set(eb)):
        if k in _IGNORED_ENV or ea.get(k) == eb.get(k):
            continue
        diffs.append(f"env {k}: {_show(eb.get(k))} on base, {_show(ea.get(k))} here")
    return diffs


def _show(v: Any) -> str:
    return "absent" if v is None else ("set" if v is True else repr(v))


def _flags(argv: list[str]) -> dict[str, Any]:
    """argv -> {flag: value or True}, the program and module ignored."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            key, eq, val = tok.partition("=")
            if eq:
                out[key] = val
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[key] = argv[i + 1]
                i += 1
            else:
                out[key] = True
        i += 1
    return out


def cudagraph_gap(arm: ArmRow) -> str | None:
    """A CUDA-graph capture list that leaves out batch size 1 (DESIGN.md mistake 7)."""
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


def validity(arm: ArmRow, base: ArmRow | None, acc: dict[str, Any],
             arm_verdicts: dict[str, tuple[str, str]]) -> list[dict[str, str]]:
    """Why this arm's figures cannot be trusted, if they cannot."""
    out = []
    launch = arm.launch or {}
    if arm.status in ("crashed", "hung"):
        out.append({"code": arm.status.upper(), "detail": arm.reason or ""})
    elif arm.status in ("failed", "interrupted"):
        out.append({"code": "INVALID", "detail": f"arm {arm.status}: {arm.reason or ''}"})
    is_spec = launch.get("speculative_config") is not None
    ran = arm.status == "ok"
    if ran and is_spec and not acc["drafts"]:
        out.append({"code": "INVALID", "detail": "speculation inactive: the draft counters did not move"})
    if ran and not is_spec and acc["drafts"]:
        out.append({"code": "INVALID", "detail": f"a non-speculating arm moved the draft counters ({acc['drafts']} drafts)"})
    if ran and is_spec and 0 < acc["drafts"] < MIN_DRAFTS:
        out.append({"code": "LOW_N", "detail": f"{acc['drafts']} drafts < {MIN_DRAFTS}: acceptance figures are noisy"})
    for gate, (verdict, reason) in arm_verdicts.items():
        if verdict == "INVALID":  # an invalidating arm gate failed (observatory.judge)
            out.append({"code": "INVALID", "detail": f"{gate}: {reason}"})
    if base is not None and arm is not base:
        diffs = launch_differences(arm, base)
        if diffs:
            out.append({"code": "CONFOUNDED", "detail": "differs from base in more than speculation: " + "; ".join(diffs)})
    if launch.get("timing") == "concurrent" and launch.get("concurrent_with"):
        out.append({"code": "CONCURRENT", "detail": "timed while " + ", ".join(launch["concurrent_with"])
                    + " ran on the same host: throughput figures are not comparable (use --timing sequential)"})
    gap = cudagraph_gap(arm)
    if gap and not is_spec:
        out.append({"code": "CONFOUNDED", "detail": gap + " on the base arm: speedups against it are inflated"})
    return out


def compute_figures(store: Any, session_id: int) -> dict[int, dict[str, Any]]:
    """Compute and store figures and validity for every arm of a session."""
    arms = store.arms(session_id)
    probes = {p.id: p for p in store.probes(session_id)}
    base = base_reference(arms)
    per_arm: dict[int, dict[str, Any]] = {}
    for a in arms:
        stream = [r for r in store.results(a.id, "stream") if r.ok]
        total = SpecCounters()
        by_cat: dict[str, SpecCounters] = defaultdict(SpecCounters)
        by_probe: dict[str, Any] = {}
        for r in stream:
            d = SpecCounters.from_dict(r.counters_delta)
            total = total + d
            cat = probes[r.probe_id].category if r.probe_id in probes else "?"
            by_cat[cat] = by_cat[cat] + d
            by_probe[probes[r.probe_id].name] = acceptance(d)
        measurements = store.measurements(a.id)
        timed_total = SpecCounters()
        for m in measurements:
            timed_total = timed_total + SpecCounters.from_dict(m.counters_delta)
        # The arm's figures count every measured request: the streamed probes
        # (read one by one) and the timed runs (read around each batch).
        acc = acceptance(total + timed_total)
        acc["from"] = {"stream": total.to_dict(), "timed": timed_total.to_dict()}
        acc["by_category"] = {k: acceptance(v) for k, v in sorted(by_cat.items())}
        acc["by_probe"] = by_probe
        timed = [r for r in store.results(a.id, "timed") if r.ok and r.concurrency == 1]
        spd = speed(timed or stream, measurements)
        per_arm[a.id] = {"acceptance": acc, "speed": spd}
    base_fig = per_arm.get(base.id) if base else None
    copies = [a for a in arms if base and (a.launch or {}).get("copy_of") == base.name]
    floor = noise_floor(store, base, copies, per_arm) if base else None
    for a in arms:
        fig = per_arm[a.id]
        spec = (a.launch or {}).get("speculative_config")
        if spec is not None and base_fig is not None:
            k = spec.get("num_speculative_tokens")
            vb = vs_base(fig["acceptance"], fig["speed"], base_fig["speed"], k if isinstance(k, int) else None)
            if floor and vb["S"] is not None and floor.get("throughput_spread") is not None:
                vb["within_noise"] = abs(vb["S"] - 1.0) <= floor["throughput_spread"]
            fig["vs_base"] = vb
        fig["noise_floor"] = floor
        arm_verdicts = {v.gate: (v.verdict, v.reason) for v in store.verdicts(a.id) if v.probe_id is None}
        store.update(ArmRow, a.id, figures=fig, validity=validity(a, base, fig["acceptance"], arm_verdicts))
    return per_arm


def noise_floor(store: Any, base: ArmRow, copies: list[ArmRow], per_arm: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
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
