"""Terminal output with rich: progress while a session runs, then the summary.

Model output is untrusted: every piece of it goes through `rich.markup.escape`
(or into a `Text` object, which never parses markup). Server-provided strings
(engine version, failure reasons, errors, the model name) are cut to
SHOWN_CHARS first: rich's highlighter runs regexes over every printed string,
and a 400 kB /version stalled the gate's output (issue 32).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from observatory.judge.precision import short_phrase, step_phrase
from observatory.judge.reasons import known_summary, split
from observatory.judge.verdict import arm_role
from observatory.model.arms import Arm
from observatory.model.probes import Probe
from observatory.model.read_model import ArmView, SessionView
from observatory.model.vocabulary import (
    BASE,
    FAIL,
    INVALID,
    JUDGED_AGAINST_BASE,
    KNOWN,
    NOT_DISCRIMINATING,
    NOTE,
    PASS,
    SKIP,
    TOKEN_DIFF,
    UNJUDGED,
    WARN,
    rank,
)
from observatory.report.console import QUIET, VERBOSE, make_console, verbosity

STYLE = {
    PASS: "green", WARN: "yellow", FAIL: "bold red", NOT_DISCRIMINATING: "magenta",
    INVALID: "bold magenta", SKIP: "dim", "ok": "green", "failed": "bold red", "crashed": "bold red",
    "hung": "bold red", "interrupted": "yellow", "pending": "dim", UNJUDGED: "bold magenta",
    KNOWN: "cyan", NOTE: "dim",
}
SHORT = {NOT_DISCRIMINATING: "NOT_DISCR"}
# An arm's counters (observatory.model.read_model.Counters) are its streamed probe pass's; alpha and tau count
# every pass (the report's Acceptance section lists each): each figure says which
PROBE_PASS_DRAFTS = "drafts (steps, probe pass)"
PROBE_PASS_ACCEPTED = "accepted (tokens, probe pass)"
ALL_PASSES = "all passes"
SHOWN_CHARS = 300


def cut(text: object, n: int = SHOWN_CHARS) -> str:
    """TEXT (a server-provided string) as shown in the terminal: at most N characters, marked if cut."""
    s = str(text)
    return s if len(s) <= n else s[:n] + f"... [{len(s) - n} more characters]"


class RichReporter:
    """Progress bars for arms and probes."""

    def __init__(self, console: Console | None = None):
        self.console = console or make_console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=self.console, transient=False,
        )
        self._arms_task: Any = None
        self._step_task: Any = None

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def session_started(self, session_id: int, arms: list[Arm], probes: list[Probe]) -> None:
        """Announce the session."""
        self.console.print(f"[bold]Session {session_id}[/]: {len(arms)} arm(s) x {len(probes)} probe(s)")
        self._arms_task = self.progress.add_task("arms", total=len(arms))

    def arm_started(self, arm: Arm, what: str) -> None:
        """An arm begins."""
        self.console.print(f"[cyan]{escape(arm.name)}[/]: {escape(what)}")
        if self._step_task is not None:
            self.progress.remove_task(self._step_task)
        self._step_task = self.progress.add_task(f"{escape(arm.name)}: loading", total=None)

    def arm_waiting(self, arm: Arm, elapsed_s: float) -> None:
        """Still waiting for /health."""
        self.progress.update(self._step_task, description=f"{escape(arm.name)}: waiting for /health ({elapsed_s:.0f} s)")

    def arm_ready(self, arm: Arm, ready_s: float, version: str | None) -> None:
        """The engine answered /health."""
        self.console.print(f"[cyan]{escape(arm.name)}[/]: ready after {ready_s:.0f} s "
                           f"(engine {escape(cut(version or '?'))})")

    def step(self, arm: Arm, label: str, done: int, total: int) -> None:
        """Progress inside an arm."""
        self.progress.update(self._step_task, description=f"{escape(arm.name)}: {escape(label)}",
                             completed=done, total=total)

    def arm_finished(self, arm: Arm, status: str, reason: str | None) -> None:
        """An arm ended."""
        style = STYLE.get(status, "")
        msg = f"[cyan]{escape(arm.name)}[/]: [{style}]{escape(status)}[/]"
        if reason:
            msg += f" — {escape(cut(reason))}"
        self.console.print(msg)
        self.progress.advance(self._arms_task)
        if self._step_task is not None:
            self.progress.remove_task(self._step_task)
            self._step_task = None


def _count(v: Any) -> str:
    return "not reported" if v is None else str(v)


def verdict_text(v: str | None) -> Text:
    """A styled verdict."""
    v = v or "-"
    return Text(SHORT.get(v, v), style=STYLE.get(v, ""))


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "not measurable" if v is None else fmt.format(v)


def arm_headline(a: ArmView) -> str:
    """One line per arm judged against base: token-identical n/N, alpha, tau, S with its CI."""
    diffs = [r.verdicts.get(TOKEN_DIFF) for r in a.results if r.ok]
    made = [d for d in diffs if d and d.verdict != UNJUDGED]
    same = sum(1 for d in made if (d.details or {}).get("kind") == "identical")
    acc = a.figures.acceptance or {}
    vs = a.figures.vs_base or {}
    ci = vs.get("ci")
    design = {"paired": "paired, ", "bracketed": "drift-corrected, "}.get(str(vs.get("design")), "")
    drift = f", base drifted {vs['drift']:+.0%}" if vs.get("design") == "bracketed" and vs.get("drift") is not None else ""
    s_text = _num(vs.get("S")) + (f" ({design}95% CI {ci[0]:.2f}-{ci[1]:.2f}{drift})" if ci else "")
    head = f"token-identical {same}/{len(made)}" + (f" ({len(diffs) - len(made)} not diffed)" if len(diffs) > len(made) else "")
    if not a.is_spec:
        return head + " · no speculation"
    return head + (f" · alpha {_num(acc.get('alpha'), '{:.3f}')} · tau {_num(acc.get('tau'))} ({ALL_PASSES})"
                   f" · S {s_text}")


def print_reasons(data: SessionView, console: Console, limit: int, width: int, notes: bool = True) -> None:
    """The verdict's reasons, one line per cause (`observatory.judge.reasons`): what counts (at most LIMIT lines
    of at most WIDTH characters), then apart, never counted, the known findings and (NOTES) the notes, else
    how many notes there are."""
    counted, known, noted = split(data.verdict)
    shown = [("", counted), ("known findings (a ledger covers them: shown, not counted)", known)]
    if notes:
        shown.append(("notes (not counted)", noted))
    for title, groups in shown:
        if groups and title:
            console.print(Text(f"  {title}:", style="dim"))
        for g in groups[:limit]:
            console.print(Text(f"  {g.line()}"[:width], style=STYLE.get(g.level, "")))
        if len(groups) > limit:
            console.print(Text(f"  ... and {len(groups) - limit} more (see the report)", style="dim"))
    if noted and not notes:
        console.print(Text(f"  notes (not counted): {sum(g.count for g in noted)} (`observatory show` lists them)",
                           style="dim"))


def print_verdict(data: SessionView, console: Console) -> None:
    """The session verdict, its reasons by cause, and each judged arm's headline."""
    v = data.verdict
    console.print(Text(f"Verdict: {v.verdict}", style=STYLE.get(v.verdict, "bold")), Text(f" — {cut(v.why)}"))
    print_reasons(data, console, 10_000 if verbosity() >= VERBOSE else 10, 300)
    for a in data.arms:
        if arm_role(a) in JUDGED_AGAINST_BASE:
            console.print(Text(f"  {a.name}:", style="cyan"), Text(arm_headline(a)))
    if data.depths is not None:
        console.print(Text(f"  {data.depths.summary()}"))


def print_summary(data: SessionView, console: Console | None = None) -> None:
    """Arms and the probe x arm matrix with 80-character previews."""
    console = console or make_console()
    s = data.session
    if verbosity() <= QUIET:  # -q: the verdict and its reasons, no tables
        console.print(f"[bold]Session {s.id}[/] {escape(s.status)} · model {escape(cut(s.model))}")
        print_verdict(data, console)
        return
    console.print(
        f"[bold]Session {s.id}[/] {escape(s.status)} · {escape(s.host or '')} · "
        f"{escape(cut(s.gpu or 'no GPU'))} · model {escape(cut(s.model))} · started {s.started_at}"
    )
    arms = Table(title="Arms", show_lines=False)
    # the report's Arms table names the same counts the same way (templates/_partials/arms.html)
    for col in ("arm", "status", "engine", PROBE_PASS_DRAFTS, PROBE_PASS_ACCEPTED, "validity / reason"):
        arms.add_column(col)
    for a in data.arms:
        c = a.counters
        notes = [f"{v.code}: {v.detail}" for v in a.validity]
        if a.reason:
            notes.append(a.reason)
        arms.add_row(
            Text(a.name), Text(a.status, style=STYLE.get(a.status, "")),
            Text(cut(a.engine_version or "-")),
            _count(c.drafts) if a.is_spec else "-",
            _count(c.accepted) if a.is_spec else "-",
            Text(cut("; ".join(notes), 200)),
        )
    console.print(arms)
    print_verdict(data, console)
    matrix = Table(title="Probe x arm (verdict, first 80 characters)", show_lines=True)
    matrix.add_column("probe")
    for a in data.arms:
        matrix.add_column(Text(a.name))
    results = [{x.probe: x for x in a.results} for a in data.arms]
    for p in data.probes:
        row: list[Any] = [Text(p.name)]
        for by_probe in results:
            r = by_probe.get(p.name)
            if r is None:
                row.append(Text("-", style="dim"))
                continue
            cell = verdict_text(r.verdict)
            cell.append("\n")
            cell.append(Text(r.preview if r.ok else f"error: {r.error}"[:80]))
            row.append(cell)
        matrix.add_row(*row)
    console.print(matrix)
    print_channels(data, console)


def print_channels(data: SessionView, console: Console) -> None:
    """One line per field channel x arm: its verdicts and the worst one's reason."""
    if not data.channels:
        return
    table = Table(title="Field channels (docs/channels.md)", show_lines=False)
    for col in ("channel", "arm", "verdict", "why"):
        table.add_column(col)
    for ch in data.channels:
        for a in ch.arms:
            vs = a.verdicts
            if not vs:
                table.add_row(Text(ch.name), Text(a.arm), Text("-", style="dim"), Text(f"no verdict ({a.status})"))
                continue
            gate, v = min(vs.items(), key=lambda kv: rank(kv[1].verdict))
            table.add_row(Text(ch.name), Text(a.arm), verdict_text(v.verdict),
                          Text(f"{gate}: {v.reason or ''}"[:160]))
    console.print(table)
    for ch in data.channels:  # a rate with its power (the volume replay): stated whatever the verdict
        for a in ch.arms:
            for gate, v in a.verdicts.items():
                power = (v.details or {}).get("power")
                if gate == ch.name and isinstance(power, Mapping) and power.get("text"):
                    console.print(Text(f"{gate} {a.arm}: {power['text']}"), soft_wrap=True)


def _rate_ttft(a: ArmView) -> tuple[str, str]:
    spd = a.figures.speed or {}
    rate, ttft = spd.get("single_stream_tok_s"), (spd.get("ttft_ms") or {}).get("median")
    return _num(rate, "{:.1f}"), _num(ttft, "{:.0f} ms")


def print_closing(data: SessionView, paths: dict[str, str], console: Console | None = None) -> None:
    """The run's last words: the session verdict and why, its reasons by cause (what counts, then the known
    findings and notes apart), each judged arm's headline with its tok/s and TTFT against base's, where the
    report, JSON and other outputs went (PATHS: label -> path), and last the verdict line. The verdict is
    `decide`'s, as every output states it (an interrupted session is INVALID unless something FAILed)."""
    console = console or make_console()
    v = data.verdict
    console.rule(Text(f"Session {data.session.id}: {v.verdict}", style=STYLE.get(v.verdict, "bold")))
    console.print(Text(f"why: {v.why}"))
    print_reasons(data, console, 3, 200, notes=False)
    base = next((a for a in data.arms if arm_role(a) == BASE), None)
    b_rate, b_ttft = _rate_ttft(base) if base else ("no base arm", "no base arm")
    for a in data.arms:
        if arm_role(a) not in JUDGED_AGAINST_BASE:
            continue
        rate, ttft = _rate_ttft(a)
        console.print(Text(f"{a.name}:", style="cyan"), Text(arm_headline(a)))
        precise = (f" · S {short_phrase(a.figures.vs_base)} · {step_phrase(a.figures.vs_base)}"
                   if a.is_spec else "")
        console.print(Text(f"  single-stream tok/s {rate} vs base {b_rate} · TTFT median {ttft} vs base {b_ttft}"
                           + precise))
    for label, path in paths.items():
        console.print(Text(f"{label}: {path}"), soft_wrap=True)  # a path stays one line, to copy
    known = known_summary(v)
    line = Text(f"verdict: {v.verdict}", style=STYLE.get(v.verdict, "bold"))
    line.append(f"; {known}" if known else "")
    console.print(line, soft_wrap=True)
