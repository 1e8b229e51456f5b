"""Static HTML reports, rendered from the read model `report_data.build()` returns (never ORM rows).

A report is a directory that opens offline from ``file://`` or a CI artifact:
``index.html`` plus ``results/A-P.html`` (arm A, probe P, both 0-based indices,
so arm names never become file names) with the full output of each result.
There are no external resources: CSS is inline, charts are inline SVG drawn by
`observatory.report.charts`, and there is no JavaScript at all.

Model output is untrusted (see docs/design.md, section 5): the Jinja environment
autoescapes with StrictUndefined, and ``|safe`` is used only on ``*_html``
values built here with `markupsafe.escape` + `Markup`.

The banner states the session verdict of `observatory.judge.verdict.decide` (the
nightly gate's), each reason linked to its result; NOTEs (LOW_N,
non-discriminating probes) do not change it.

``render_cross(a, b, out)`` puts two sessions side by side under a loud banner
(docs/design.md mistake 6) and computes no speedup across them unless asked to;
sessions that served different models get a second banner naming both, their
speed columns are marked not comparable, and no speedup across them is
computed even when asked (issue 32 item 7).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from observatory.engines.images import arm_image
from observatory.judge.graph_coverage import words as graph_words
from observatory.judge.reasons import group_reasons
from observatory.judge.steady_state import words as steady_words
from observatory.judge.verdict import arm_role
from observatory.model.paths import TEMPLATES_DIR
from observatory.model.previews import PREVIEW_CHARS
from observatory.model.read_model import ArmView, Reason, ResultView, SessionFacts, SessionView
from observatory.model.vocabulary import (
    AA_COPY,
    BASE,
    COUNTED_LEVELS,
    ERROR,
    FAIL,
    FAULT,
    INFO,
    INVALID_CODES,
    JUDGED_AGAINST_BASE,
    PASS,
    REASON_LEVELS,
    SKIP,
    TOKEN_DIFF,
    VARIANT,
    WARN,
    row_rank,
)
from observatory.report import charts, speed_view
from observatory.report.channel_blocks import PASS_ROWS_SHOWN, channel_anchor, channel_views, row_level
from observatory.report.token_spans import tokens_html, visible
from observatory.report.volume_section import volume_section

# gate -> (reference label, compared label (None: the arm's name), what is compared)
DIFF_GATES = {
    TOKEN_DIFF: ("base", None, "spec vs base"),
    f"{TOKEN_DIFF}:nonstream": ("streamed", "non-streamed", "non-streamed vs streamed"),
    f"{TOKEN_DIFF}:batch": ("alone (streamed)", "in a concurrent batch", "batch vs alone"),
}
# the passes an arm's acceptance counts (observatory.judge.figures: acc["from"]), as the report names them
PASSES = (("stream", "streamed probes (correctness pass)"), ("timed", "timed runs (speed pass)"))
CROSS_BANNER = ("different sessions: not comparable (docs/design.md, mistake 6): on a shared machine the same "
                "configuration can run at very different tok/s in two sessions")


def num(v: Any, digits: int = 2) -> str:
    """A number with DIGITS decimals; "—" when missing."""
    return "—" if v is None else f"{float(v):.{digits}f}"


def pct(v: Any) -> str:
    """A fraction as a percentage; "—" when missing."""
    return "—" if v is None else f"{100.0 * float(v):.1f}%"


def environment() -> Environment:
    """The one Jinja environment: autoescaped, strict about undefined names."""
    env = Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=num, pct=pct, pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False,
                                                                      default=str))
    return env


def result_href(ai: int, pi: int) -> str:
    """Relative link of one result's detail page."""
    return f"results/{ai}-{pi}.html"


def _g(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def role_words(a: ArmView) -> str:
    """The arm's role in words: base, A/A copy, or the speculative config."""
    spec = a.speculative_config
    role = arm_role(a)
    config = (f"{spec.get('method', 'spec')} k={spec.get('num_speculative_tokens', '?')}" if isinstance(spec, Mapping)
              else "speculating")
    if role == BASE:
        return "base (no speculation)"
    if role == AA_COPY:
        return f"A/A copy of {a.copy_of} (no speculation)"
    if role == VARIANT:
        return "variant (no speculation), diffed against base"
    words = config + (" · injected fault" if role == FAULT else "")
    return f"copy of {a.copy_of} · {words}" if a.copy_of else words


def arm_view(a: ArmView) -> dict[str, Any]:
    """One arm with every figure the templates read present (None when missing)."""
    acc = a.figures.acceptance or {}
    spd = a.figures.speed or {}
    vs = a.figures.vs_base
    per_pos, hist = acc.get("per_position") or [], acc.get("histogram") or []
    codes = [v.code for v in a.validity]
    levels = sorted(_g(spd, "throughput") or {}, key=int)
    return {
        "name": a.name, "role": role_words(a), "status": a.status,
        "reason": a.reason, "is_spec": a.is_spec,
        "engine_version": a.engine_version, "validity": a.validity,
        "arm_gates": sorted((g, v.verdict, v.reason) for g, v in a.arm_verdicts.items()),
        "bad": any(c in INVALID_CODES for c in codes), "log_tail": a.log_tail,
        "log_path": a.log_path, "show_log": a.status not in ("ok", "pending"),
        "argv": shlex.join(a.launch.get("argv") or []), "env": a.launch.get("env") or {},
        "url": a.launch.get("url"), "fault": a.launch.get("fault"),
        "image": arm_image(dict(a.launch)),  # docker hook: ref, digest, engine inside
        "alpha": acc.get("alpha"), "tau": acc.get("tau"), "drafts": acc.get("drafts"),
        "draft_tokens": acc.get("draft_tokens"), "accepted": acc.get("accepted"),
        # the streamed probe pass's counters: what the terminal's Arms table prints (observatory.report.terminal)
        "probe_pass": {"drafts": a.counters.drafts, "draft_tokens": a.counters.draft_tokens,
                       "accepted": a.counters.accepted},
        "passes": [(label, _g(acc, "from", key) or {}) for key, label in PASSES if _g(acc, "from", key)],
        "by_category": acc.get("by_category") or {},
        "per_pos_html": charts.bars(per_pos, [f"p{j + 1}" for j in range(len(per_pos))],
                                    f"{a.name}: P(accepted ≥ j)", xlabel="draft position j")
        if per_pos else None,
        "hist_html": charts.bars(hist, [str(j) for j in range(len(hist))], f"{a.name}: P(n accepted)",
                                 color=charts.PALETTE[2], xlabel="accepted per draft n") if hist else None,
        "ttft_med": _g(spd, "ttft_ms", "median"), "ttft_p90": _g(spd, "ttft_ms", "p90"),
        "itl_med": _g(spd, "itl_ms", "median"), "itl_p90": _g(spd, "itl_ms", "p90"),
        "single": spd.get("single_stream_tok_s"), "decode": speed_view.decode_or_why(spd),
        "latency": speed_view.latency_rows(spd),
        "requests": spd.get("requests"),
        "throughput": {lv: _g(spd, "throughput", lv, "tok_s") for lv in levels},
        "vs": {k: _g(vs, k) for k in ("S", "ci", "r", "c", "pays", "statement", "break_even_alpha",
                                      "within_noise", "cross_session", "detectable_change", "half_width",
                                      "timed_requests", "timed_s", "traffic_for", "design", "pairs",
                                      "incomplete_pairs", "unpaired", "step", "not_measurable", "drift",
                                      "before", "after", "unbracketed")}
        if isinstance(vs, Mapping) else None,
        "bursty": spd.get("bursty") if _g(spd, "bursty", "bursty") else None,
        "bursty_timed": speed_view.bursty_level_one(spd),
        "token_source": spd.get("token_source"),
        "by_concurrency": a.figures.by_concurrency or {},
        "stream_tau": a.figures.stream_tau, "stream_counter_tau": a.figures.stream_counter_tau,
        "performance": a.figures.performance or [],
        "trust_notes": speed_notes(a),
    }


def speed_notes(a: ArmView) -> list[str]:
    """Whether the arm's speed figures can be trusted (issue 29 items 3-4): warm-up left out, GPU clocks, CUDA
    graphs; one phrase each, for the speed section (nothing for an arm never timed)."""
    fig = a.figures
    out = [steady_words(dict(fig.steady_state))] if fig.steady_state else []
    clocks = fig.gpu_clocks
    if clocks:
        blocks = [b for b in clocks.get("blocks") or [] if b.get("measurable")]
        moved = [b for b in blocks if b.get("moved")]
        widest = max((float(b.get("sm_range") or 0.0) for b in blocks), default=0.0)
        out.append(f"GPU clocks: {clocks.get('why') or 'not measurable'}" if not blocks else
                   f"GPU clocks moved in {len(moved)} of {len(blocks)} timed blocks (widest SM range {widest:.1%})"
                   if moved else f"GPU clocks steady in {len(blocks)} timed block(s) (widest SM range {widest:.1%})")
    if fig.cuda_graphs:
        out.append(graph_words(dict(fig.cuda_graphs)))
    return out


def diff_anchor(ai: int, pi: int, gate: str) -> str:
    """The id of one divergence card on the index page (arm AI, probe PI, GATE)."""
    return f"diff-{ai}-{pi}-{gate.replace(':', '-')}"


def perf_anchor(ai: int, check: str) -> str:
    """The id of one performance check's row of arm AI."""
    return f"perf-{ai}-" + "".join(c if c.isalnum() or c in "_-" else "-" for c in str(check))


def diff_views(data: SessionView, only: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """Every divergence of the session (or of one result): token_diff and its stream/batch variants.

    For every result's own list at once, use `diffs_by_result` (one pass).
    """
    if only is not None:
        return diffs_by_result(data).get(only, [])
    return sorted_diffs(diffs_by_result(data))


def sorted_diffs(by_result: Mapping[tuple[int, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every divergence of `diffs_by_result`, failures first (run order within a level)."""
    return sorted((d for ds in by_result.values() for d in ds), key=lambda d: row_rank(d["verdict"]))


def diffs_by_result(data: SessionView) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """(arm index, probe index) -> that result's divergences, in one pass over the session."""
    pidx = {p.name: i for i, p in enumerate(data.probes)}
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for ai, a in enumerate(data.arms):
        for r in a.results:
            pi = pidx.get(r.probe, -1)
            for gate, (ref, cand, label) in DIFF_GATES.items():
                v = r.verdicts.get(gate)
                if v is None:
                    continue
                d = v.details or {}
                if d.get("kind") in ("identical", None) and v.verdict in (PASS, SKIP):
                    continue
                if gate == TOKEN_DIFF and a.copy_of:
                    label = "A/A control vs base"
                out.setdefault((ai, pi), []).append({
                    "arm": a.name, "probe": r.probe, "href": result_href(ai, pi), "gate": gate,
                    "anchor": diff_anchor(ai, pi, gate),
                    "label": label, "verdict": v.verdict, "reason": v.reason, "kind": d.get("kind"),
                    "position": d.get("position"), "margin": d.get("margin"),
                    "lower_bound": bool(d.get("margin_is_lower_bound")), "near_tie_nats": d.get("near_tie_nats"),
                    "longer": d.get("longer"), "ref_label": ref, "cand_label": cand or a.name,
                    "ref_id": d.get("base_token_id"), "cand_id": d.get("spec_token_id"),
                    # equal pieces of text, other token ids (a re-tokenisation): say so, never two "same" rows
                    "same_text": bool(d.get("base_continuation")) and
                    d.get("base_continuation") == d.get("spec_continuation"),
                    "prefix_html": tokens_html(d.get("prefix")) if d.get("prefix") else None,
                    "ref_html": tokens_html(d.get("base_continuation"), mark_first=True),
                    "cand_html": tokens_html(d.get("spec_continuation"), mark_first=True),
                })
    return out


def evidence_href(data: SessionView, reason: Reason,
                  diffs: dict[tuple[int, int], list[dict[str, Any]]] | None = None) -> str | None:
    """Where one verdict reason's evidence is: a divergence card, a channel block, a performance check or an
    arm row on the index page, or the result's own page; for a reason about the whole session, the arms table
    (no base arm), the probe matrix (no probe discriminates) or the session facts (its status)."""
    arm, probe, gate, code = reason.arm, reason.probe, reason.gate, reason.code
    aidx = {a.name: i for i, a in enumerate(data.arms)}
    if arm is None:
        if code == "NO_BASE":
            return "#arms"
        return "#facts" if reason.text.startswith("session ") else "#matrix"
    if arm not in aidx:
        return None
    ai, a = aidx[arm], data.arms[aidx[arm]]
    pidx = {p.name: i for i, p in enumerate(data.probes)}
    if probe is not None:
        if probe not in pidx:
            return None
        pi = pidx[probe]
        found = (diffs_by_result(data) if diffs is None else diffs).get((ai, pi), [])
        if gate is not None and any(d["gate"] == gate for d in found):
            return "#" + diff_anchor(ai, pi, gate)
        return result_href(ai, pi) + "#verdicts"
    if gate is not None and (code == "CHANNEL" or gate in a.channel_verdicts):
        return "#" + channel_anchor(ai, gate)
    if gate is not None and any(p.get("check") == gate for p in a.figures.performance or []):
        return "#" + perf_anchor(ai, gate)
    return f"#arm-{ai}"


def _entry_shown(known: Any) -> dict[str, Any] | None:
    """A known-findings entry as the banner shows it: its link only where it is an http(s) URL (the stored
    details are data: never a javascript: link)."""
    if not isinstance(known, Mapping):
        return None
    link = known.get("link")
    ok = isinstance(link, str) and link.startswith(("https://", "http://"))
    return {"id": known.get("id"), "link": link if ok else None, "reproduction": known.get("reproduction")}


def overall(data: SessionView, diffs: dict[tuple[int, int], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The verdict banner: the session verdict of `observatory.judge.verdict.decide`, its reasons one line per
    cause (`observatory.judge.reasons`), each linked to its evidence.

    The report renders the one verdict policy, so the banner, the gate's exit
    status, JUnit and ``show --json`` never disagree. Reasons are listed FAIL,
    INVALID, WARN, then apart the KNOWN findings (with their ledger entry's link)
    and the NOTEs, each with a link (`evidence_href`) where it has one.
    """
    v = data.verdict
    diffs = diffs_by_result(data) if diffs is None else diffs
    reasons = [{"level": g.level, "text": g.text, "count": g.count, "known": _entry_shown(g.known),
                "href": evidence_href(data, g.first, diffs)} for g in group_reasons(v.reasons)]
    counts = {lv: sum(r.level == lv for r in v.reasons) for lv in REASON_LEVELS}
    return {"verdict": v.verdict, "why": v.why, "reasons": reasons, "counts": counts}


def matrix(data: SessionView, prefix: str = "") -> list[dict[str, Any]]:
    """Probe rows, one cell per arm: worst verdict, 80-character preview, link, stream/batch flags."""
    rows = []
    # issue 50 item 6: no red cell the verdict does not explain. A cell's FAIL, INVALID or WARN is drawn as a
    # counted verdict only where a reason of the session verdict names its arm and probe; the reference arm's
    # own verdicts (base: they make the probe not discriminating) and anything else the verdict leaves out
    # are drawn muted, saying why they are not counted.
    explained = {(r.arm, r.probe) for r in data.verdict.reasons if r.level in COUNTED_LEVELS}
    # each arm's first result per probe, indexed once (was a scan per cell)
    by_probe: list[dict[str, ResultView]] = [{} for _ in data.arms]
    for ai, a in enumerate(data.arms):
        for x in a.results:
            by_probe[ai].setdefault(x.probe, x)
    for pi, p in enumerate(data.probes):
        cells: list[dict[str, Any] | None] = []
        for ai, _a in enumerate(data.arms):
            r = by_probe[ai].get(p.name)
            if r is None:
                cells.append(None)
                continue
            stream_flags = [(g, r.verdicts[g].verdict) for g in (f"{TOKEN_DIFF}:nonstream", f"{TOKEN_DIFF}:batch")
                            if g in r.verdicts]
            flags = [{"text": f"{DIFF_GATES[g][1]} differs", "verdict": verdict}
                     for g, verdict in stream_flags if verdict in (FAIL, WARN)]
            # timed outputs, one verdict per concurrency level (token_diff:cN)
            flags += [{"text": f"timed at c={g.split(':c', 1)[1]} differs", "verdict": v.verdict}
                      for g, v in sorted(r.verdicts.items())
                      if ":c" in g and g.split(":c", 1)[1].isdigit() and v.verdict in (FAIL, WARN)]
            # r.preview is report_data's: the text, or the tool calls' one-line form when there is no text
            verdict = r.verdict or ("—" if r.ok else ERROR)
            uncounted = None
            if verdict in COUNTED_LEVELS and (_a.name, p.name) not in explained:
                uncounted = ("not counted: the reference arm's own verdict (a probe base fails does not "
                             "discriminate)" if arm_role(_a) not in JUDGED_AGAINST_BASE
                             else "not counted: no reason of the session verdict names this cell")
            cells.append({"verdict": verdict, "preview": r.preview, "ok": r.ok,
                          "error": (r.error or "")[:PREVIEW_CHARS], "href": prefix + result_href(ai, pi),
                          "flags": flags, "uncounted": uncounted})
        worst = min((str(c["verdict"]) for c in cells if c and not c["uncounted"]), key=row_rank, default=INFO)
        rows.append({"probe": p, "cells": cells, "worst": worst})
    rows.sort(key=lambda row: row_rank(row["worst"]))  # failures first, suite order within a level
    return rows


def facts(s: SessionFacts, arms: Sequence[ArmView]) -> list[tuple[str, Any]]:
    """Session facts as (label, value) rows; None values render as "—"."""
    m = s.machine or {}
    engines = sorted({a.engine_version for a in arms if a.engine_version})
    cpu = m.get("cpu") and f"{m.get('cpu')} ({m.get('cpus', '?')} cores, {m.get('memory_gib', '?')} GiB)"
    return [
        ("session", s.id), ("status", s.status), ("host", s.host), ("CPU", cpu),
        ("GPU", s.gpu or ", ".join(m.get("gpus") or []) or None), ("driver", m.get("driver")),
        ("engine", ", ".join(engines) or None), ("model", s.model), ("image", s.image),
        ("suite", s.suite), ("observatory", s.observatory_version),
        ("python / platform", " / ".join(x for x in (m.get("python"), m.get("platform")) if x) or None),
        ("started", s.started_at), ("finished", s.finished_at),
        ("command", shlex.join(s.command or []) or None),
    ]


def context(data: SessionView, diffs: dict[tuple[int, int], list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Everything report.html reads, derived from the read model alone (DIFFS: `diffs_by_result`, if known)."""
    diffs = diffs_by_result(data) if diffs is None else diffs
    arms = [{**arm_view(a), "ai": i} for i, a in enumerate(data.arms)]
    for a in arms:
        a["trouble"] = bool(a["bad"] or a["status"] != "ok")
    spec = [a for a in arms if a["is_spec"]]
    perf_rows = sorted(({**c, "arm": a, "anchor": perf_anchor(a["ai"], c.get("check", ""))}
                        for a in spec for c in a["performance"]), key=lambda c: row_rank(str(c.get("verdict"))))
    cats = sorted({c for a in spec for c in a["by_category"]})
    levels = sorted({lv for a in arms for lv in a["throughput"]}, key=int)
    floor = next((a.figures.noise_floor for a in data.arms if a.figures.noise_floor), None)
    views = channel_views(data)
    strips(views)
    return {
        "s": data.session, "facts": facts(data.session, data.arms),
        "overall": overall(data, diffs), "arms": arms, "spec": spec,
        "matrix": matrix(data), "diffs": sorted_diffs(diffs), "categories": cats, "levels": levels,
        "floor": floor, "triages": data.triages, "channels": data.channels,
        "channel_views": views, "pass_rows": PASS_ROWS_SHOWN, "perf_rows": perf_rows,
        "volume": volume_section(data),
        "speedup_html": speedup_chart(spec, floor), "per_pos_html": acceptance_chart(data, spec),
        "cross_engine": data.cross_engine,
        "speed_html": charts.hbars([(a["name"], [a["single"], a["decode"]]) for a in arms],
                                   ["single-stream", "decode only"], "Speed per arm", "tok/s"),
        "throughput_html": charts.grouped_bars(
            [f"c={lv}" for lv in levels], [a["name"] for a in arms],
            [[a["throughput"].get(lv) for a in arms] for lv in levels], "Throughput per concurrency", "tok/s")
        if levels else None,
    }


def speedup_chart(spec: Sequence[Mapping[str, Any]], floor: Mapping[str, Any] | None) -> Markup | None:
    """S per spec arm with its 95% interval, the line S = 1 and the A/A band 1 ± throughput spread
    (the band `observatory.judge.figures` calls "within noise"); None without a spec arm."""
    if not spec:
        return None
    spread = (floor or {}).get("throughput_spread")
    band = (1.0 - float(spread), 1.0 + float(spread)) if spread is not None else None
    rows = [(a["name"], (a["vs"] or {}).get("S"), (a["vs"] or {}).get("ci")) for a in spec]
    return charts.intervals(rows, "S per arm (single-stream, vs base), 95% interval", band=band,
                            band_label="A/A noise" if band else "no A/A copy: noise unmeasured")


def acceptance_chart(data: SessionView, spec: Sequence[Mapping[str, Any]]) -> Markup | None:
    """P(accepted >= j) per draft position j, one bar per spec arm (positions up to the largest k)."""
    per = {a.name: list((a.figures.acceptance or {}).get("per_position") or []) for a in data.arms if a.is_spec}
    names = [a["name"] for a in spec if per.get(a["name"])]
    if not names:
        return None
    k = max(len(per[n]) for n in names)
    values = [[per[n][j] if j < len(per[n]) else None for n in names] for j in range(k)]
    return charts.grouped_bars([f"p{j + 1}" for j in range(k)], names, values,
                               "Acceptance per draft position, per arm: P(accepted ≥ j)", xlabel="draft position j",
                               vmax=1.0)


def strips(views: Sequence[Mapping[str, Any]]) -> None:
    """Give each length-sweep block a strip of its rows' levels in length order (`charts.strip`), in place."""
    for ch in views:
        if ch["name"] != "length_sweep":
            continue
        for b in ch["blocks"]:
            rows = (b.get("rows_raw") or [])
            items = sorted(((r.get("length"), row_level(r)) for r in rows if isinstance(r.get("length"), int)),
                           key=lambda x: x[0])
            b["strip_html"] = (charts.strip([(f"length {n}", lv) for n, lv in items],
                                            f"{b['arm']}: verdict per prompt length", f"length {items[0][0]}",
                                            f"length {items[-1][0]}") if items else None)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def render_session(data: SessionView, out: Path | str) -> Path:
    """Write index.html and one detail page per result into OUT; return index.html."""
    out = Path(out)
    env = environment()
    diffs = diffs_by_result(data)
    ctx = context(data, diffs)
    pidx = {p.name: i for i, p in enumerate(data.probes)}
    result_page = env.get_template("result.html")
    for ai, a in enumerate(data.arms):
        for r in a.results:
            pi = pidx[r.probe]
            page = result_page.render(
                s=data.session, arm=ctx["arms"][ai], r=r, diffs=diffs.get((ai, pi), []),
                gate_rows=sorted(r.verdicts.items(), key=lambda gv: (row_rank(gv[1].verdict), gv[0])),
                tokens=token_rows(r), acc=_g(a.figures.acceptance, "by_probe", r.probe) or {}, root="../")
            _write(out / result_href(ai, pi), page)
    index = out / "index.html"
    _write(index, env.get_template("report.html").render(**ctx, root=""))
    return index


def token_rows(r: ResultView) -> list[dict[str, Any]]:
    """Per generated token: id, visible text, its logprob, and the top alternatives."""
    texts = r.token_texts or []
    tops = r.top_logprobs or []
    rows = []
    for i, tid in enumerate(r.token_ids or []):
        top = tops[i] if i < len(tops) else []
        chosen = next((lp for t, lp in top if t == tid), None)
        rows.append({"i": i, "id": tid, "text": visible(texts[i]) if i < len(texts) else "",
                     "logprob": chosen, "alts": ", ".join(f"#{t} {lp:.2f}" for t, lp in top[:5])})
    return rows


def _base(data: SessionView, engine: str | None = None) -> ArmView | None:
    """DATA's base arm (ENGINE given: the base of that engine, observatory.model.roles)."""
    return next((a for a in data.arms if arm_role(a) == BASE and engine in (None, a.engine)), None)


def cross_speedups(a: SessionView, b: SessionView) -> list[dict[str, Any]]:
    """Speedups of each session's spec arms over the OTHER session's base (flagged cross-session)."""
    from observatory.judge.figures import vs_base  # here: numpy costs 0.3 s at start-up of every report

    out = []
    for spec_s, base_s in ((a, b), (b, a)):
        for arm in spec_s.arms:
            if not arm.is_spec or not arm.figures.speed:
                continue
            base = _base(base_s, arm.engine)  # an arm over the other session's base of its engine
            base_speed = base.figures.speed if base is not None else None
            if base is None or not base_speed:
                continue
            vb = vs_base(dict(arm.figures.acceptance or {}), dict(arm.figures.speed), dict(base_speed),
                         _g(arm.speculative_config, "num_speculative_tokens"))
            out.append({"arm": arm.name, "arm_session": spec_s.session.id,
                        "base_session": base_s.session.id, "base": base.name, **vb})
    return out


def _flag_value(argv: Sequence[Any], flag: str) -> str | None:
    """The value of FLAG in a launch ARGV (``--dtype X`` or ``--dtype=X``); None where it is not given."""
    args = [str(x) for x in argv]
    for i, x in enumerate(args):
        if x == flag and i + 1 < len(args):
            return args[i + 1]
        if x.startswith(flag + "="):
            return x.split("=", 1)[1]
    return None


def arm_differences(a: SessionView, b: SessionView) -> list[str]:
    """What differs between the arms of one name in both sessions: the engine, the speculative config
    (another k under one name), the dtype; each named "arm NAME: what (A vs B)"."""
    out: list[str] = []
    theirs = {x.name: x for x in b.arms}
    for arm in a.arms:
        other = theirs.get(arm.name)
        if other is None:
            continue
        pairs = [("engine", arm.engine, other.engine),
                 ("speculative config", json.dumps(arm.speculative_config, sort_keys=True),
                  json.dumps(other.speculative_config, sort_keys=True)),
                 ("dtype", _flag_value((arm.launch or {}).get("argv") or [], "--dtype"),
                  _flag_value((other.launch or {}).get("argv") or [], "--dtype"))]
        out += [f"arm {arm.name}: {what} ({x} vs {y})" for what, x, y in pairs if x != y]
    return out


# stored plan keys that change what a session measures or how (observatory.session.options.SessionPlan)
PLAN_DIFFERENCES = ("parallel_arms", "timing", "gpus_per_arm", "concurrency", "repeat", "profile", "channels",
                    "dtype", "max_model_len", "seed", "engine_args", "spec_extra", "image", "fail_on", "diffs",
                    "tool_parser", "reasoning_parser", "aa_copy")


def plan_differences(a: SessionView, b: SessionView) -> list[str]:
    """What the two sessions' stored plans set differently (e.g. ``--parallel-arms`` against sequential arms),
    each named "plan KEY (A vs B)"; a key one session did not store (an older plan) is not compared."""
    plans = [dict((d.session.options or {}).get("plan") or {}) for d in (a, b)]
    out = []
    for key in PLAN_DIFFERENCES:
        if key in plans[0] and key in plans[1] and plans[0][key] != plans[1][key]:
            out.append(f"plan {key} ({json.dumps(plans[0][key])} vs {json.dumps(plans[1][key])})")
    return out


def served_models(data: SessionView) -> list[str]:
    """Every model DATA served: the session's and each arm's (an arm's server may name its own), sorted."""
    names = {data.session.model} | {a.model for a in data.arms}
    return sorted(str(n) for n in names if n)


def render_cross(a: SessionView, b: SessionView, out: Path | str,
                 allow_cross_session: bool = False) -> Path:
    """Two sessions side by side (each also rendered whole under s<ID>/); return index.html."""
    out = Path(out)
    sides: list[dict[str, Any]] = []
    for data in (a, b):
        sid = data.session.id
        render_session(data, out / f"s{sid}")
        sides.append({"s": data.session, "prefix": f"s{sid}/", "overall": overall(data),
                      "facts": dict(facts(data.session, data.arms)),
                      "arms": [arm_view(x) for x in data.arms]})
    fa, fb = sides[0]["facts"], sides[1]["facts"]
    differs = [k for k in fa if k not in ("session", "status", "started", "finished", "command") and fa[k] != fb[k]]
    models = [served_models(a), served_models(b)]
    other_model = models[0] != models[1]
    if other_model and "model" not in differs:
        differs.insert(0, "model")
    differs += plan_differences(a, b) + arm_differences(a, b)
    names = list(dict.fromkeys([p.name for p in a.probes] + [p.name for p in b.probes]))
    hashes = [{p.name: p.hash for p in d.probes} for d in (a, b)]
    rows = []
    # each side's matrix once, indexed by probe name (was recomputed per probe)
    matrices = [{r["probe"].name: r for r in matrix(data, side["prefix"])} for side, data in zip(sides, (a, b))]
    for name in names:
        cells: list[dict[str, Any] | None] = []
        for data, by_name in zip((a, b), matrices):
            row = by_name.get(name)
            cells += row["cells"] if row else [None] * len(data.arms)
        changed = name in hashes[0] and name in hashes[1] and hashes[0][name] != hashes[1][name]
        rows.append({"name": name, "changed": changed, "cells": cells})
    page = environment().get_template("compare.html").render(
        sides=sides, banner=CROSS_BANNER, differs=differs, rows=rows, allow=allow_cross_session,
        models=models, other_model=other_model,
        cross=cross_speedups(a, b) if allow_cross_session and not other_model else [], root="")
    index = out / "index.html"
    _write(index, page)
    return index
