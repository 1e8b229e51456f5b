"""`observatory known add|list|check`, and the --known options `compare`, `gate`, `selftest` and `judge` take.

The ledger format is `observatory.model.ledger` (docs/known.md); what it
covers in a session, `observatory.judge.ledger_match`. ``known add`` appends one
``[[known]]`` table to the file as text (the file's comments and order stay),
after checking that the whole file still loads strictly and that the new
entry covers something in the session it was made from.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from observatory.judge.ledger_match import (
    arm_facts,
    check_ledger,
    engine_names,
    resolve,
    store_findings,
)
from observatory.model.arms import arms_file_known
from observatory.model.errors import ObservatoryError
from observatory.model.ledger import (
    DEFAULT_FILE,
    DEFAULT_LEVELS,
    KnownEntry,
    KnownError,
    Ledger,
    glob_matches,
    parse_entries,
    parse_entry,
)
from observatory.model.safe_read import read_text
from observatory.store.session_store import Store

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def known_options() -> list[Callable[..., Any]]:
    """--known and --no-builtin-known: the known-findings ledger a command puts in effect (docs/known.md)."""
    return [
        click.option("--known", "known_files", multiple=True, type=click.Path(dir_okay=False),
                     help=f"A known-findings ledger (TOML, docs/known.md): the findings it covers read KNOWN and "
                          f"never count; repeatable (default: ./{DEFAULT_FILE} if present; an arms file's "
                          "known = [...] adds its own), beside the built-in ledger of the engine bugs "
                          "docs/engines.md documents."),
        click.option("--no-builtin-known", is_flag=True, help="Leave the built-in known-findings ledger out."),
    ]


def with_known_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate F with `known_options`."""
    for o in reversed(known_options()):
        f = o(f)
    return f


def ledger_for(kw: dict[str, Any], stored: Any = None, session_id: int | None = None) -> Ledger:
    """The ledger a command puts in effect, its --known options popped from KW: the files given (else
    ./observatory-known.toml if present), an arms file's (KW's ``arms_file``), the built-ins unless
    --no-builtin-known; with neither flag given and a session's STORED ledger, that one (re-judging and
    resuming keep the ledger the session ran with)."""
    files, no_builtin = tuple(kw.pop("known_files", ()) or ()), bool(kw.pop("no_builtin_known", False))
    if stored is not None and not files and not no_builtin:
        return Ledger.from_stored(stored, f"session {session_id}'s stored ledger")
    arms_file = kw.get("arms_file")
    return resolve(files, not no_builtin, Path.cwd(), arms_file_known(arms_file) if arms_file else ())


db_option = click.option("--db", envvar="OBSERVATORY_DB", default=None,
                         help="SQLite file or SQLAlchemy URL (default: runs.db, or $OBSERVATORY_DB).")


@click.group(name="known")
def known() -> None:
    """Known findings: a ledger of triaged findings; each one it covers reads KNOWN (shown, never counted).

    A ledger is TOML, one [[known]] table per finding, loaded strictly (docs/known.md):

    \b
      [[known]]
      id = "vllm-min-p"                 # unique: letters, digits, . _ -
      title = "min_p refused with speculation"
      link = "https://github.com/..."   # and/or reproduction = "a path or command"
      engine = "vllm"                   # the adapter's name
      versions = "==0.32.0"             # PEP 440, or ["exact", ...]; omitted: any
      checks = ["params:min_p"]         # gates, channels, performance checks, validity codes (globs)
      arms = ["spec"]                   # names, roles, repair=NAME (globs; "!GLOB" leaves out)
      probes = ["*"]                    # globs
      reason = "not yet supported"      # optional: the reason must contain it (any case)
      levels = ["WARN", "FAIL"]         # the default; INVALID, UNJUDGED too
      platform = "cpu"                  # optional: cpu or cuda; dtype = "bfloat16" too
      expires = 2027-03-01              # optional: covers sessions started before it

    compare, gate, selftest and judge read --known FILE (repeatable), else ./observatory-known.toml, plus an
    arms file's known = [...] and the built-in ledger of the engine bugs docs/engines.md documents
    (--no-builtin-known leaves it out). The session stores the entries in effect; `judge` re-applies them.
    """


def _write_atomically(path: Path, text: str) -> None:
    """TEXT into PATH through a temporary file in the same folder (a crash leaves the old file whole)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent or Path(".")))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def new_entry(store: Any, session_id: int, raw: dict[str, Any], arms: tuple[str, ...]) -> KnownEntry:
    """The entry RAW describes, its engine and versions filled from the session's arms: those ARMS names (names
    or roles, globs), else those where one of its checks has a finding at one of its levels."""
    findings, rows, _ = store_findings(store, session_id)
    roles = {f.arm.name: f.arm for f in findings}
    facts = [roles.get(a.name) or arm_facts(a.name, a.role or "", a.launch, a.engine_version, a.engine)
             for a in rows]
    for pattern in arms:
        if not any(glob_matches((pattern,), f.names()) for f in facts):
            raise ObservatoryError(f"--arm {pattern}: no arm of session {session_id} is named so or has that role "
                                   f"(its arms: {', '.join(f.name for f in facts)})")
    levels = tuple(raw.get("levels") or DEFAULT_LEVELS)
    found = {f.arm.name for f in findings if f.level in levels
             and any(fnmatch.fnmatchcase(f.check, c) for c in raw["checks"])}
    chosen = [f for f in facts if glob_matches(arms, f.names())] if arms else \
        [f for f in facts if f.name in found]
    if not chosen:
        raise ObservatoryError(f"session {session_id}: no arm has a {' or '.join(levels)} finding of "
                               f"{', '.join(raw['checks'])}; name the arm with --arm")
    engines = sorted({f.engine for f in chosen})
    if len(engines) > 1:
        raise ObservatoryError(f"arms {', '.join(f.name for f in chosen)} ran on {' and '.join(engines)}: one "
                               "entry is about one engine; add one per engine")
    filled: dict[str, Any] = {"engine": engines[0], "arms": list(arms or [f.name for f in chosen])}
    if "versions" not in raw:
        versions = sorted({f.version for f in chosen if f.version})
        if not versions:
            raise ObservatoryError(f"the engine version of {', '.join(f.name for f in chosen)} is unknown; give "
                                   "--versions")
        filled["versions"] = versions
    return parse_entry({**raw, **filled}, "the new entry", engine_names())


@known.command(name="add")
@click.argument("session_id", type=int)
@click.option("--check", "--gate", "checks", multiple=True, required=True,
              help="A gate, channel, performance check or validity code the finding shows in (glob; repeatable), "
                   "e.g. params:min_p, finish, speedup, CRASHED.")
@click.option("--arm", "arms", multiple=True,
              help="An arm (name or role, glob; repeatable); default: the arms with such a finding.")
@click.option("--probe", "probes", multiple=True, help="A probe it covers (glob; repeatable); default: all.")
@click.option("--id", "entry_id", required=True, help="A unique id: letters, digits, '.', '_', '-'.")
@click.option("--title", help="What the finding is, in one line (default: the first finding it covers, cut to 120 "
                                "characters).")
@click.option("--link", help="An http(s) URL: the upstream issue or fix.")
@click.option("--reproduction", help="A path or a command that reproduces it (a link, a reproduction or both).")
@click.option("--reason", "reasons", multiple=True,
              help="A phrase the verdict's reason must contain (any case; repeatable: any of them).")
@click.option("--level", "levels", multiple=True, help="A level it may cover (repeatable; default WARN and FAIL).")
@click.option("--versions", help="The engine versions (a PEP 440 specifier); default: the arms' exact versions.")
@click.option("--platform", type=click.Choice(["cpu", "cuda"]), help="Only on this platform.")
@click.option("--expires", help="A date (2027-03-01): it covers sessions started before it.")
@click.option("--file", "path", default=DEFAULT_FILE, show_default=True, type=click.Path(dir_okay=False),
              help="The ledger file to append to (made if missing).")
@db_option
def known_add(session_id: int, checks: tuple[str, ...], arms: tuple[str, ...], probes: tuple[str, ...],
              entry_id: str, title: str | None, link: str | None, reproduction: str | None, reasons: tuple[str, ...],
              levels: tuple[str, ...], versions: str | None, platform: str | None, expires: str | None,
              path: str, db: str | None) -> None:
    """Add a finding of a stored session to a ledger file, its engine and versions taken from the session's arm.

    \b
    observatory known add 12 --check params:min_p --arm mtp1 --id vllm-min-p \\
        --link https://github.com/vllm-project/vllm/issues/1
    observatory known add 12 --check finish --reason stop_str --id ids-past-stop --title "..." \\
        --reproduction "docs/engines.md" --file ci/observatory-known.toml
    """
    raw: dict[str, Any] = {"id": entry_id, "title": title or "(from the first finding it covers)", "checks": list(checks)}
    for key, value in (("link", link), ("reproduction", reproduction), ("versions", versions),
                       ("platform", platform), ("expires", expires)):
        if value is not None:
            raw[key] = value
    for key, values in (("probes", probes), ("reason", reasons), ("levels", levels)):
        if values:
            raw[key] = list(values)
    store = Store(db, create=False)
    entry = new_entry(store, session_id, raw, arms)
    found = check_ledger(store, session_id, Ledger((entry,)))
    n = len(found["covered"].get(entry.id, []))
    if not n:
        raise ObservatoryError(f"entry {entry.id} covers nothing in session {session_id} (engine {entry.engine}, "
                               f"arms {', '.join(entry.arms)}, checks {', '.join(entry.checks)}, levels "
                               f"{', '.join(entry.levels)}): check --check, --arm, --reason and --level")
    if title is None:  # the first covered finding's words: "ARM / PROBE: CHECK: LEVEL: reason"
        first = " ".join(found["covered"][entry.id][0].split())
        entry = replace(entry, title=first if len(first) <= 120 else first[:119] + "…")
    target = Path(path)
    old = read_text(target, KnownError, "known-findings ledger") if target.exists() else (
        "# Known findings this team has triaged: each covered finding reads KNOWN, shown and never counted\n"
        "# (observatory docs/known.md). Append with `observatory known add`.\n")
    text = (old if old.endswith("\n") or not old else old + "\n") + "\n" + entry.to_toml()
    try:
        parse_entries(tomllib.loads(text), str(target), engine_names())  # the whole file, strictly: ids unique
    except tomllib.TOMLDecodeError as e:
        raise KnownError(f"{target}: not valid TOML before the new entry: {e}") from None
    _write_atomically(target, text)
    click.echo(f"added {entry.id} to {target}: covers {n} finding(s) of session {session_id}, e.g. "
               f"{found['covered'][entry.id][0][:200]}")
    click.echo(f"apply it: observatory judge {session_id} --known {target}")


def _entry_line(e: KnownEntry) -> str:
    versions = e.versions if isinstance(e.versions, str) or e.versions is None else ", ".join(e.versions)
    where = " ".join(x for x in (e.platform, e.dtype) if x)
    parts = [f"{e.id}: {e.title}", f"  {e.engine} {versions or 'any version'}{' ' + where if where else ''}; "
             f"checks {', '.join(e.checks)}; arms {', '.join(e.arms)}"
             + (f"; probes {', '.join(e.probes)}" if e.probes != ("*",) else "")
             + (f"; reason contains {' or '.join(repr(r) for r in e.reason)}" if e.reason else "")
             + (f"; levels {', '.join(e.levels)}" if e.levels != DEFAULT_LEVELS else "")
             + (f"; expires {e.expires}" if e.expires else ""),
             f"  {e.link or e.reproduction} ({e.source})"]
    return "\n".join(parts)


@known.command(name="list")
@click.option("--known", "--file", "known_files", multiple=True, type=click.Path(dir_okay=False),
              help=f"A ledger file (repeatable; default ./{DEFAULT_FILE} if present).")
@click.option("--no-builtin-known", is_flag=True, help="Leave the built-in ledger out.")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as one JSON list.")
def known_list(known_files: tuple[str, ...], no_builtin_known: bool, as_json: bool) -> None:
    """List the known findings a command here would put in effect: your ledgers' entries, then the built-ins.

    \b
    observatory known list
    observatory known list --file ci/observatory-known.toml --no-builtin-known --json
    """
    ledger = ledger_for({"known_files": known_files, "no_builtin_known": no_builtin_known})
    if as_json:
        click.echo(json.dumps([{**e.to_stored(), "source": e.source} for e in ledger.entries], indent=1))
        return
    for e in ledger.entries:
        click.echo(_entry_line(e))


@known.command(name="check")
@click.argument("session_id", type=int, required=False)
@with_known_options
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def known_check(session_id: int | None, known_files: tuple[str, ...], no_builtin_known: bool, db: str | None,
                as_json: bool) -> None:
    """Show what a ledger would cover in a stored session, and which entries apply but would not be seen (writes
    nothing; with no --known, the session's stored ledger, else the one a new session would get).

    \b
    observatory known check 12
    observatory known check 12 --known observatory-known.toml --no-builtin-known
    """
    store = Store(db, create=False)
    s = store.session(session_id)
    ledger = ledger_for({"known_files": known_files, "no_builtin_known": no_builtin_known}, store.known(s.id), s.id)
    found = check_ledger(store, s.id, ledger)
    if as_json:
        click.echo(json.dumps({"session": s.id, **found}, indent=1))
        return
    click.echo(f"session {s.id}: {sum(len(v) for v in found['covered'].values())} finding(s) covered by "
               f"{len(found['covered'])} of {len(ledger.entries)} entries")
    for entry_id, lines in found["covered"].items():
        click.echo(f"  KNOWN {entry_id}: {len(lines)}")
        for line in lines[:5]:
            click.echo(f"    {' '.join(line.split())[:200]}")
        if len(lines) > 5:
            click.echo(f"    ... and {len(lines) - 5} more")
    for entry_id in found["not_seen"]:
        click.echo(f"  NOTE known finding {entry_id} not seen: fixed?")
    for entry_id in found["expired"]:
        click.echo(f"  NOTE known finding {entry_id} expired: it covers nothing")
