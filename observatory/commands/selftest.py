"""`observatory selftest`: prove the gates fire on the real engine (negative controls).

Runs base, an A/A copy of base, the clean spec arm and one copy of it per
injected fault (see `observatory.faults`) in one session, on the `selftest`
suite unless --suite says otherwise, then prints, per fault, which gates
caught it. Exits 0 only if every fault is caught and both controls are clean:
the A/A copy and the clean spec arm (no FAIL verdict).

With ``--profile nightly`` every field channel runs too (docs/channels.md),
and each channel's own faults join the list: a channel's fault counts as
caught only when that channel FAILs it; the table shows every gate and
channel that caught each fault, so a fault one channel sees and the others
miss shows as such.

A fault that changes only rejected drafts (accept_all) cannot show on a suite
where the draft head is never wrong; the clean spec arm's counters say how
many drafts were rejected, and a miss with none rejected is reported as
"not exercised" (still a failure: the control proved nothing).
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from observatory.channels import get as get_channel
from observatory.channels import resolve as resolve_channels
from observatory.commands import INTERRUPTED_EXIT
from observatory.commands.compare import compare_options, run_compare
from observatory.faults import FAULTS as FAULT_REGISTRY
from observatory.judge.verdict import SessionVerdict, arm_role
from observatory.model.errors import ObservatoryError
from observatory.model.read_model import ArmView, SessionView
from observatory.model.roles import AA_COPY, FAULT, SPEC
from observatory.report.data import build

DEFAULT_ARM = "mtp1"
# The faults selftest injects: the unconditional ones (the knob-conditional ghost_* faults are triage's).
FAULTS = ("accept_all", "ghost", "drop_bonus")
DEFAULT_SUITE = "selftest"


def fault_plan(profile: str | None, names: str | None) -> dict[str, str | None]:
    """fault -> the channel that must catch it (None: the suite's gates), for the channels the profile runs."""
    plan: dict[str, str | None] = {f: None for f in FAULTS}
    for name in resolve_channels(profile, names):
        for fault in get_channel(name).faults:
            plan.setdefault(fault, name)
    return plan


def _failures(arm: ArmView, verdict: SessionVerdict) -> list[str]:
    """What makes a control arm unclean: its FAIL and INVALID reasons in the session verdict.

    The default speed floor (an arm clearly slower than base) is left out: it judges the deployment's
    speed, not whether a fault-free arm is caught as faulty (on CPU engines a clean spec arm can be slower).
    """
    speed = {f"{arm.name}: speedup: {p.get('reason')}" for p in arm.figures.performance or []
             if p.get("check") == "speedup"}
    return [r.text for r in verdict.reasons if r.arm == arm.name and r.level in ("FAIL", "INVALID")
            and r.text not in speed]


def selftest_findings(data: SessionView) -> dict[str, Any]:
    """Per fault arm: the gates that failed it; the A/A control's and the clean spec arm's cleanliness.

    A fault counts as caught by FAIL verdicts only: probes the base arm fails
    are NOT_DISCRIMINATING for the fault arm and do not count. Roles come from
    the session (`observatory.model.roles`); cleanliness from the one verdict policy.
    """
    verdict = data.verdict
    findings: dict[str, Any] = {"faults": {}, "aa": None, "clean": None}
    for arm in data.arms:
        role = arm_role(arm)
        c = arm.counters
        if role == SPEC and not arm.copy_of:
            bad = _failures(arm, verdict)
            drafted, accepted = c.draft_tokens, c.accepted
            findings["clean"] = {"arm": arm.name, "status": arm.status, "failures": bad,
                                 "clean": arm.status == "ok" and not bad, "draft_tokens": drafted,
                                 "rejected": drafted - accepted if drafted is not None and accepted is not None
                                 else None}
        elif role == FAULT:
            gates: dict[str, int] = {}
            for r in arm.results:
                for g, v in r.verdicts.items():
                    if v.verdict == "FAIL":
                        gates[g] = gates.get(g, 0) + 1
            channels = sorted({g.split(":", 1)[0] for g, v in arm.channel_verdicts.items() if v.verdict == "FAIL"})
            findings["faults"][arm.launch.get("fault")] = {
                "arm": arm.name, "status": arm.status, "caught_by": gates, "channels": channels,
                "drafts": c.drafts}
        elif role == AA_COPY:
            bad = _failures(arm, verdict)
            findings["aa"] = {"arm": arm.name, "status": arm.status, "failures": bad,
                              "clean": arm.status == "ok" and not bad}
    return findings


@click.command(name="selftest")
@compare_options(exclude=("arms", "arms_file", "speculative_config"))
@click.option("--spec-arm", default=DEFAULT_ARM, show_default=True,
              help="The speculating preset each fault is injected into (mtpK).")
@click.option("--faults", "fault_names", help="Comma list of faults to inject (default: all of the profile's).")
def selftest(spec_arm: str, fault_names: str | None, **kw: Any) -> int:
    """Inject each known fault into a real engine and show which gates and channels catch it.

    \b
    observatory selftest
    observatory selftest --spec-arm mtp2 --db selftest.db
    observatory selftest --profile nightly --spec-arm mtp2
    """
    expected = fault_plan(kw.get("profile"), kw.get("channels"))
    if fault_names:
        wanted = [f.strip() for f in fault_names.split(",") if f.strip()]
        unknown = [f for f in wanted if f not in expected and f not in FAULT_REGISTRY]
        if unknown:
            raise ObservatoryError(f"--faults: unknown fault {unknown[0]!r} (known: {', '.join(sorted(FAULT_REGISTRY))})")
        expected = {f: expected.get(f) for f in wanted}
    faults = tuple(expected)
    arms = ["base", "base", spec_arm] + [f"{spec_arm}+fault={f}" for f in faults]
    kw.update(arms=",".join(arms), arms_file=None, speculative_config=None, suite=kw.get("suite") or DEFAULT_SUITE)
    store, session_id, interrupted = run_compare(kw)
    if interrupted:
        return INTERRUPTED_EXIT
    findings = selftest_findings(build(store, session_id))
    console = Console()
    table = Table(title=f"selftest (session {session_id})")
    for col in ("fault", "must be caught by", "arm", "drafts", "caught by", ""):
        table.add_column(col)
    ok = True
    spec = findings["clean"]
    no_rejections = bool(spec and spec["status"] == "ok" and spec["rejected"] == 0)
    for fault in faults:
        f = findings["faults"].get(fault)
        channel = expected.get(fault)
        if channel is None:  # a suite fault: any gate's FAIL on the suite catches it
            caught = bool(f and (f["caught_by"] or f["channels"]) and f["status"] == "ok")
        else:  # a channel's fault: its own channel must name it
            caught = bool(f and channel in f["channels"] and f["status"] == "ok")
        ok &= caught
        gates = ", ".join([f"{g} ({n})" for g, n in sorted(f["caught_by"].items())]
                          + [f"channel {c}" for c in f["channels"]]) if f else ""
        if caught:
            mark = Text("CAUGHT", style="green")
        elif fault == "accept_all" and no_rejections:
            mark = Text("NOT EXERCISED: no draft was rejected on this suite", style="bold red")
        else:
            mark = Text("MISSED", style="bold red")
        table.add_row(fault, Text(f"channel {channel}" if channel else "any gate"), Text(f["arm"] if f else "-"), str(f["drafts"] if f else "-"), Text(gates or "nothing"),
                      mark)
    console.print(table)
    for label, control in (("A/A control", findings["aa"]), ("clean spec control", spec)):
        clean = bool(control and control["clean"])
        ok &= clean
        line = f"{label} {control['arm'] if control else '-'}: " + ("clean" if clean else f"NOT clean: {control}")
        if control is spec and spec:
            line += f" ({spec['rejected']} of {spec['draft_tokens']} draft tokens rejected)"
        console.print(Text(line, style="green" if clean else "bold red"))
    return 0 if ok else 1
