"""`observatory compare`: run arms one after another in one session."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click
from click.core import ParameterSource
from sqlalchemy.engine import make_url

from observatory.channels import PROFILES
from observatory.commands import INTERRUPTED_EXIT
from observatory.commands.ci_options import exit_code_of, metrics_out_option, summary_md_option
from observatory.commands.known_cmd import known_options, ledger_for
from observatory.engines.arm_engines import listed_engines
from observatory.judge.perf_gates import parse_fail_on
from observatory.model.arms import DEFAULT_ENGINE
from observatory.model.errors import ObservatoryError
from observatory.model.gates import registry_for
from observatory.model.read_model import SessionView
from observatory.model.redact import redact_text, remember, remember_engine, remember_url
from observatory.model.suites import FORMATS
from observatory.model.suites.records import printable
from observatory.model.vocabulary import EXIT
from observatory.report.ci_files import CiFiles
from observatory.report.console import VERBOSE, set_verbosity
from observatory.report.data import build
from observatory.report.terminal import RichReporter, print_closing, print_summary
from observatory.session.options import SessionPlan
from observatory.session.plan import TIMINGS, embedded_model, plan_compare
from observatory.session.preflight import check_serves
from observatory.session.runner import RESUMED_STATUSES, Interrupted, Reporter, Runner
from observatory.store.db import SessionRow, database_url
from observatory.store.session_store import Store
from observatory.store.storage_failure import StorageFailed, guarded


def positive_seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """Click callback: a finite number of seconds above zero (0, negative, NaN or inf is a usage error)."""
    if not math.isfinite(value) or value <= 0:
        raise click.BadParameter(f"{value:g} is not a positive number of seconds; give e.g. 300.", ctx, param)
    return value


def _verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        set_verbosity(VERBOSE)


def compare_options(f: Callable[..., Any] | None = None, *,
                    exclude: tuple[str, ...] = ()) -> Callable[..., Any]:
    """The options shared by `compare`, `gate` and `selftest` (minus EXCLUDE, by option name)."""
    if f is None:
        return lambda g: compare_options(g, exclude=exclude)
    opts = [
        click.option("--arms", default="base,mtp1,mtp2", show_default=True,
                     help="Comma list: base, mtpK, ngramK, spec, names from --arms-file, NAME=URL; +fault=F."),
        click.option("--arms-file", type=click.Path(dir_okay=False), help="TOML file of named arms."),
        click.option("--speculative-config", help="JSON speculative config for the arm named 'spec'."),
        click.option("--deployed-spec", help="The production speculation config, as JSON or as the deployment's "
                     "launch command line: the session always runs an arm with exactly it (added if --arms has "
                     "none) and states the depths covered."),
        click.option("--model", help="Model path or name (default: the embedded tiny MTP model)."),
        click.option("--suite", help="Probe suite: a name in probes/, a .toml suite, or your requests: OpenAI "
                     "request logs (JSONL), ShareGPT, vllm bench or AIPerf files (docs/probes.md; default: the "
                     "bundled model's suite, else probes/generic.toml)."),
        click.option("--suite-format", type=click.Choice(list(FORMATS)),
                     help="The --suite file's format (default: .toml, or detected from its records and said)."),
        click.option("--db", envvar="OBSERVATORY_DB", help="SQLite file or SQLAlchemy URL (default runs.db)."),
        click.option("--engine-python", help="Interpreter that has vLLM (default: this one)."),
        click.option("--dtype", help="Engine --dtype for every arm."),
        click.option("--max-model-len", type=int, help="Engine --max-model-len for every arm."),
        click.option("--seed", type=int, default=0, show_default=True, help="Engine --seed."),
        click.option("--engine-arg", "engine_args", multiple=True,
                     help="Extra engine flag for every arm (repeatable), e.g. --engine-arg=--enforce-eager."),
        click.option("--spec-extra", help="JSON merged into every speculative config."),
        click.option("--tool-parser", default="hermes", show_default=True,
                     help="vLLM --tool-call-parser of launched arms, or none (an arms file's tool_parser wins)."),
        click.option("--reasoning-parser",
                     help="vLLM --reasoning-parser of launched arms (an arms file's reasoning_parser wins)."),
        click.option("--profile", type=click.Choice(list(PROFILES)), default="quick", show_default=True,
                     help="quick: the suite alone; nightly: the suite plus the nightly field channels; deep: "
                          "nightly plus the engine-condition channels (docs/channels.md)."),
        click.option("--channels", help="Comma list of field channels to run (overrides --profile's list)."),
        click.option("--volume", type=int, default=None,
                     help="Requests per arm of the volume replay (channel volume; the nightly's default 2000); "
                          "given with any profile, it runs the replay."),
        click.option("--aa-copy/--no-aa-copy", "aa_copy", default=True, show_default=True,
                     help="nightly profile: add an A/A copy of each base arm unless --arms has one (the noise "
                          "floor speed and history need; one more arm to launch and time)."),
        click.option("--channel-controls/--no-channel-controls", "channel_controls", default=True,
                     show_default=True,
                     help="Add the control arms the channels run need (stream_fields: base streaming k + 1 "
                          "tokens per chunk, base+stream_interval=N; one more arm to launch)."),
        click.option("--concurrency", default="1", show_default=True, help="Throughput levels, e.g. 1,4,16."),
        click.option("--repeat", type=int, default=1, show_default=True, help="Repeats of the timed runs."),
        click.option("--health-timeout", type=float, default=900.0, show_default=True,
                     help="Seconds to wait for each engine's /health."),
        click.option("--request-timeout", type=float, default=300.0, show_default=True,
                     callback=positive_seconds,
                     help="Seconds one whole request may take before it counts as hung (a deadline)."),
        click.option("--log-dir", default="logs", show_default=True, help="Where engine logs go."),
        click.option("--api-key", envvar="OBSERVATORY_API_KEY",
                     help="Bearer key for URL arms (never stored)."),
        click.option("--no-diffs", is_flag=True, help="Skip the non-streamed and concurrent-batch passes."),
        click.option("--image", help="Serving image: launch each arm as a container of IMAGE (ARM@IMAGE for one arm)."),
        click.option("--gpus-per-arm", type=int, default=1, show_default=True,
                     help="GPUs each arm gets (CUDA_VISIBLE_DEVICES), e.g. 2 for TP=2 arms."),
        click.option("--parallel-arms", is_flag=True, help="Run arms at once on disjoint GPUs of this host."),
        click.option("--timing", type=click.Choice(list(TIMINGS)), default="auto",
                     show_default=True, help="auto: bracketed where base's server can stay up beside the spec arms "
                     "(the CPU engine; a GPU with an explicit --gpu-memory-utilization share), else sequential; "
                     "bracketed: each spec arm's single-stream repeats timed between two blocks of base's, so S "
                     "comes with the host's drift (a drifting host makes S not measurable, never a FAIL); "
                     "sequential: each arm timed alone, one after another; concurrent (with --parallel-arms): as "
                     "they ran (flagged); paired: base's and the spec arm's single-stream requests alternated."),
        click.option("--engine", default=DEFAULT_ENGINE, show_default=True,
                     help=f"Engine of URL arms: {listed_engines()} (what /metrics and the version mean)."),
        click.option("--fail-on", help="Performance thresholds that FAIL (else breaches WARN), e.g. "
                     "'speedup<1.0,ttft_ratio>3,acceptance<0.5'."),
        click.option("-q", "--quiet", is_flag=True,
                     help="No progress output (`observatory -q COMMAND` also leaves out the tables)."),
        click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbose,
                     help="Print every reason of the verdict, not the first ones."),
        click.option("--gates-dir", "gates_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="A folder of your own gate files (*.py), run beside the built-in gates; repeatable."),
        *known_options(),
    ]
    for o in reversed(opts):
        probe = o(lambda: None)
        if probe.__click_params__[0].name in exclude:  # type: ignore[attr-defined]
            continue
        f = o(f)
    return f


INVALID_EXIT = 2
def redact_argv(argv: list[str]) -> list[str]:
    """The command line as stored: the value of --api-key replaced (issue 7: keys are never stored)."""
    out: list[str] = []
    hide = False
    for a in argv:
        if hide:
            out.append("***")
            hide = False
        elif a == "--api-key":
            out.append(a)
            hide = True
        elif a.startswith("--api-key="):
            out.append("--api-key=***")
        else:
            out.append(a)
    return out


def run_compare(kw: dict[str, Any], resume: int | None = None,
                before_run: Callable[[], None] | None = None,
                given: dict[str, tuple[str, Any]] | None = None) -> tuple[Store, int | None, bool]:
    """Plan, run and judge one session (or resume one); returns (store, session id, interrupted).

    Everything is validated before the database is opened for writing, so a
    compare that fails validation leaves no database behind (issue 19 item 4).
    BEFORE_RUN (e.g. `gate` checking its output paths) runs once the plan is
    valid and before the database is written or any arm launches. With
    RESUME the session's stored plan is run; GIVEN ({option: (flag, value)},
    the flags the user typed) must agree with it.
    """
    quiet = kw.pop("quiet")
    db = kw.pop("db")
    known_kw: dict[str, Any] = {k: kw.pop(k) for k in ("known_files", "no_builtin_known") if k in kw}
    api_key = kw.pop("api_key", None)
    remember(api_key)  # masked wherever it would be stored or shown (issue 19 item 5)
    store: Store | None = None
    finished: frozenset[str] = frozenset()
    if resume is not None:
        store = Store(db, create=False, write=True)
        plan = SessionPlan.from_stored(store.check_not_running(resume).options.get("plan"), resume)
        plan = plan.refuse_conflicts(given or {}, resume)
        finished = frozenset(a.name for a in store.arms(resume) if a.status not in RESUMED_STATUSES)
    else:
        plan = SessionPlan.from_options(kw)
    registry_for(list(plan.gates_dirs))  # a bad gate file is a setup error, found before anything launches
    kept = store.known(resume) if store is not None and resume else None
    ledger = ledger_for({**known_kw, "arms_file": plan.arms_file}, kept, resume)  # a bad ledger: exit 3, now
    opts = plan_compare(plan, api_key=api_key, command=redact_argv(sys.argv), finished=finished)
    for note in opts.notes:  # the suite read, the records it dropped (escaped, masked): before anything runs
        click.echo(printable(redact_text(note)), err=True)
    remember_engine(opts.settings.extra_args, opts.settings.env)
    for arm in opts.arms:
        remember_url(arm.url)
        remember_engine(arm.engine_args, arm.env)  # --api-key VALUE, HF_TOKEN=... (issue 32 item 1)
    if before_run is not None:
        before_run()
    if store is None:  # issue 50 item 7: a database that cannot be written is refused before any request is sent
        store = writable_if_present(db)
    check_serves(opts.arms, api_key, opts.plan.engine)  # a URL arm's missing serving flag, named (exit 3)
    if store is None:
        store = Store(db, write=True)
    from observatory.commands.evaluate import evaluate  # here: the judge pulls in numpy, which --help never needs

    judged: Store = store

    def judge(sid: int) -> None:
        evaluate(judged, sid)  # verdicts stored after every wave, as its arms finish

    runner = Runner(store, opts, on_wave_done=judge)
    if resume is not None:
        runner.attach(resume)
        session_id = resume
    else:
        session_id = runner.create_session()
    # judge re-applies the thresholds from the session's options
    options = dict(store.session(session_id).options or {})
    guarded(store, session_id, lambda: store.update(  # a resumed legacy plan is stored typed
        SessionRow, session_id, options={**options, "fail_on": parse_fail_on(plan.fail_on), "plan": opts.plan.to_stored()}))
    # and the known-findings ledger stored with it (no file needed; the entries about these arms' engines)
    guarded(store, session_id, lambda: store.set_known(
        session_id, ledger.for_engines({a.engine for a in opts.arms}).to_stored()))
    try:
        stored = True
        try:
            if quiet:
                runner.run(session_id)
            else:
                with RichReporter() as rep:
                    runner.reporter = cast(Reporter, RedactingReporter(rep))
                    runner.run(session_id)
        except StorageFailed:
            stored = False  # the database takes no more: nothing to judge now (`judge` or --resume later)
            raise
        finally:
            if stored:  # the judge runs after the runner, however the run ended
                guarded(store, session_id, lambda: judge(session_id))
    except (Interrupted, KeyboardInterrupt):
        if store.session(session_id).status == "complete":  # cut while judging: its verdicts may be partial
            guarded(store, session_id, lambda: store.finish_session(
                session_id, "interrupted", "interrupted while judging: `observatory judge` judges it whole"))
        click.echo(f"Interrupted: servers stopped; session {session_id} stored as interrupted.", err=True)
        return store, session_id, True
    return store, session_id, False


def writable_if_present(db: str | None) -> Store | None:
    """The database opened for writing when it exists (a read-only one is a setup error here, before any request
    reaches a server); None for a SQLite file still to be made, once its directory is found writable (it is
    made after the last check, so a run refused by one leaves no database behind)."""
    url = database_url(db)
    path = make_url(url).database if url.startswith("sqlite") else None
    if path is None or path == ":memory:" or path.startswith("file:") or Path(path).exists():
        return Store(db, write=True)
    parent = Path(path).parent
    if parent.is_dir() and not os.access(parent, os.W_OK):
        raise ObservatoryError(f"--db {path}: the directory {parent} is not writable, so the database cannot be "
                               "made there. Choose another --db.")
    return None


class RedactingReporter:
    """A reporter whose text arguments are redacted before they are printed (URLs, keys)."""

    def __init__(self, inner: Reporter):
        self.inner = inner

    def __getattr__(self, name: str) -> Callable[..., None]:
        fn = getattr(self.inner, name)
        return lambda *args: fn(*(redact_text(a) if isinstance(a, str) else a for a in args))


def produced_results(data: SessionView) -> bool:
    """Whether any arm of a built session produced at least one answer (a result without error)."""
    return any(r.ok for a in data.arms for r in a.results)


@click.command(name="compare")
@compare_options
@click.option("--resume", type=int, metavar="SESSION",
              help="Run the arms an interrupted SESSION is missing, from its stored plan "
                   "(a flag that differs from that plan is refused).")
@metrics_out_option
@summary_md_option
def compare(resume: int | None, metrics_out: str | None, summary_md: str | None, **kw: Any) -> None:
    """Run arms one after another in one session and judge every output; exit as `gate` does: 0 PASS or WARN,
    1 FAIL, 2 INVALID, 3 setup error, 4 internal error, 5 storage failure (130 interrupted).

    \b
    observatory compare --arms base,mtp1,mtp2
    observatory compare --arms base,base,mtp1 --concurrency 1,4 --repeat 3
    observatory compare --model /models/qwen --arms base,mtp2
    observatory compare --arms base=http://10.0.0.5:8000,mtp2=http://10.0.0.5:8001
    observatory compare --resume 7
    observatory compare --arms base,base,mtp2 --fail-on 'speedup<1.0,ttft_ratio>3,acceptance<0.5'
    """
    db = str(kw.get("db") or "")
    db = "" if not db else " --db URL" if "://" in db else f" --db {db}"  # for the closing block; a URL may hold a password
    ctx = click.get_current_context()
    typed = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    given = {p.name: (p.opts[0], kw[p.name]) for p in ctx.command.params
             if p.name in kw and ctx.get_parameter_source(p.name) in typed}
    model = kw.get("model") or str(embedded_model(kw.get("profile")).path)
    try:
        ci = CiFiles.checked(metrics=metrics_out, summary=summary_md)  # checked before any arm
        store, session_id, interrupted = run_compare(kw, resume, given=given)
    except BaseException as e:
        code = exit_code_of(e)
        if code != 0:  # issue 50 item 3: CI reads its files on every exit
            CiFiles.best_effort(None, metrics_out, None, summary_md).write_failure(
                code, str(e) if code == 3 else f"{type(e).__name__}: {e}", model)
        raise
    with store:  # closed here, not at interpreter exit: SQLite folds its -wal file back into the database
        data = build(store, session_id)
    if interrupted:
        ci.write_session(data, INTERRUPTED_EXIT)  # what was stored, with the exit status CI sees
        sys.exit(INTERRUPTED_EXIT)
    print_summary(data)
    ci.write_session(data, EXIT[data.verdict.verdict] if produced_results(data) else INVALID_EXIT)
    paths = {"report": f"not written: observatory report {session_id}{db} --out report/",
             "json": f"not written: observatory show {session_id}{db} --json", **ci.paths()}
    print_closing(data, paths)
    if not produced_results(data):
        # Issue 19 item 10: every arm failed, so nothing was measured (exit 2, an invalid measurement).
        click.echo(f"compare: no arm produced a result; session {session_id} measured nothing "
                   f"(`observatory show {session_id}` has each arm's reason).", err=True)
        sys.exit(INVALID_EXIT)
    if EXIT[data.verdict.verdict]:  # the same exit codes as `gate` (issue 46 item 4)
        sys.exit(EXIT[data.verdict.verdict])
