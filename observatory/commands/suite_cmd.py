"""`observatory suite import|show|check`: your requests as probes (issue 48 item 1; docs/probes.md).

``suite import LOG... --out suite.toml`` reads request logs and datasets
(`observatory.model.suites`: OpenAI request bodies as a gateway logs them,
ShareGPT, ``vllm bench serve``'s and AIPerf's files), masks them as
everything stored is masked (plus e-mail addresses and credential-shaped
strings), keeps identical requests once, samples ``--sample N`` of them
with ``--seed S`` (the same files and seed give the same suite) and writes
the suite (TOML, or OpenAI Batch API lines for a ``.jsonl`` name). It says
which format it read each file as, and names every record it did not keep
and why, one line each (``FILE:LINE: why``); ``--drops FILE`` writes every
such line where the terminal shows the first ``--show`` of them.

``suite show FILE`` lists what a suite (in any format) holds; ``suite check
FILE`` validates it: exit 0 when every record loads, 1 when any is dropped
(each named), 3 when the file cannot be read as a suite at all.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click

from observatory.model.errors import ObservatoryError
from observatory.model.suites import DEFAULT_MAX_TOKENS, FORMATS, Dropped, Limits, SuiteRead, read_suite
from observatory.model.suites.importer import Imported, import_logs
from observatory.model.suites.records import printable
from observatory.model.suites.write import suite_jsonl, suite_toml
from observatory.model.vocabulary import EXIT, FAIL, PASS
from observatory.report.outputs import OutputFile

SHOW = 50  # dropped records listed on the terminal (--show)

format_option = click.option("--format", "fmt", type=click.Choice(list(FORMATS)),
                             help="The file's format (default: detected from the file, and said).")


def _echo(text: str, err: bool = False) -> None:
    click.echo(printable(text), err=err)


def _drops(dropped: list[Dropped], notes: list[str], show: int) -> None:
    for d in dropped[:show]:
        _echo(f"  dropped {d.line()}")
    if len(dropped) > show:
        _echo(f"  ... and {len(dropped) - show} more dropped record(s) (--drops FILE writes every line)")
    for n in notes[:show]:
        _echo(f"  note: {n}")
    if len(notes) > show:
        _echo(f"  ... and {len(notes) - show} more note(s)")


@click.group(name="suite")
def suite() -> None:
    """Probe suites from your own requests: import a log, show or check a suite (docs/probes.md).

    \b
    observatory suite import gateway.jsonl --out suite.toml --sample 200 --seed 1
    observatory suite show suite.toml
    observatory suite check traffic.jsonl
    """


@suite.command(name="import")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The suite to write: FILE.toml (docs/probes.md), or FILE.jsonl (OpenAI Batch API lines).")
@click.option("--sample", type=int, help="Keep this many of the distinct requests (default: all, at most 10,000).")
@click.option("--seed", type=int, default=0, show_default=True, help="The sample's seed: the same seed, the same suite.")
@format_option
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Cap on each probe's max_tokens (and its value when the request has none).")
@click.option("--name", "suite_name", help="The suite's name (default: the output file's stem).")
@click.option("--drops", type=click.Path(dir_okay=False), help="Write every dropped record's line to this file.")
@click.option("--show", type=click.IntRange(0), default=SHOW, show_default=True,
              help="Dropped records listed here (the rest are counted).")
@click.option("--max-record-bytes", type=click.IntRange(1), default=Limits().record_bytes, show_default=True,
              help="A longer record is dropped as oversized.")
@click.option("--max-records", type=click.IntRange(1), default=Limits().records, show_default=True,
              help="Records read from one file at most (the rest is not read, and said).")
def import_(logs: tuple[str, ...], out: str, sample: int | None, seed: int, fmt: str | None, max_tokens: int,
            suite_name: str | None, drops: str | None, show: int, max_record_bytes: int, max_records: int) -> None:
    """Make a suite of request logs or datasets: masked, deduplicated, sampled with a seed.

    Reads OpenAI chat/completions request bodies as a gateway logs them (bare, wrapped in body/request, or
    Batch API lines), ShareGPT, vllm bench serve's sharegpt/custom/spec_bench files and AIPerf's
    single_turn/multi_turn/mooncake_trace files; says which format it read and names every record it drops.

    \b
    observatory suite import gateway.jsonl --out suite.toml --sample 200 --seed 1
    observatory suite import sharegpt.json aiperf.jsonl --out mixed.toml --drops dropped.txt
    """
    target = OutputFile(Path(out), "--out")  # an unwritable place is found before anything is read
    drops_file = OutputFile(Path(drops), "--drops") if drops else None
    if target.path.suffix not in (".toml", ".jsonl"):
        raise ObservatoryError(f"--out {target.path}: name a .toml suite (docs/probes.md) or a .jsonl of OpenAI "
                               "Batch API lines")
    limits = Limits(record_bytes=max_record_bytes, records=max_records)
    got = import_logs([Path(x) for x in logs], fmt, sample, seed, max_tokens, limits,
                      progress=lambda p, n: _echo(f"{p}: {n} records read ...", err=True))
    for f in got.files:
        _echo(f.headline().replace(" probe(s) from", " distinct request(s) from"))
        _drops(f.dropped, f.notes, show)
    if not got.probes:
        raise ObservatoryError(f"no request loads from {', '.join(logs)}: nothing to write "
                               "(the lines above say why; docs/probes.md lists the formats)")
    name = suite_name or target.path.stem
    unwritable: list[Dropped] = []
    if target.path.suffix == ".toml":
        text, kept, unwritable = suite_toml(got.probes, name, _description(got), got.origins)
    else:
        text, kept = suite_jsonl(got.probes), got.probes
    for d in unwritable[:show]:
        _echo(f"  dropped {d.line()}")
    if drops_file is not None:
        drops_file.write_text("".join(printable(d.line()) + "\n" for d in [*got.dropped, *unwritable]))
    target.write_text(text)
    lost = f"; {len(unwritable)} TOML cannot hold" if unwritable else ""
    _echo(f"wrote {target.path}: {len(kept)} probe(s) ({_sampled(got)}{lost}); run it with "
          f"`observatory compare --suite {target.path}`")


def _sampled(got: Imported) -> str:
    if got.capped:
        return (f"{len(got.probes)} sampled of {got.loadable} distinct requests, the most a suite holds, seed "
                f"{got.seed}; --sample N to choose")
    if got.sample is not None and got.sample < got.loadable:
        return f"{len(got.probes)} sampled of {got.loadable} distinct requests, seed {got.seed}"
    return f"all {got.loadable} distinct requests"


def _description(got: Imported) -> str:
    files = "\n".join(f"  {printable(f.path)}: {f.format}, {f.records} record(s), {len(f.dropped)} dropped"
                      for f in got.files)
    return (f"Imported by `observatory suite import` ({_sampled(got)}); masked as everything stored is, plus "
            f"e-mail addresses and credential-shaped strings.\nFrom:\n{files}\n")


def _read(path: str, fmt: str | None, max_tokens: int) -> SuiteRead:
    return read_suite(Path(path), fmt, max_tokens)


def _preview(p: Any) -> str:
    if p.messages:
        last = p.messages[-1].get("content")
        text = last if isinstance(last, str) else json.dumps(last, ensure_ascii=False)
    else:
        text = p.prompt if isinstance(p.prompt, str) else f"{len(p.prompt or [])} token ids"
    text = text or ""
    return printable(text[:60]) + ("..." if len(text) > 60 else "")


@suite.command(name="show")
@click.argument("file", type=click.Path(dir_okay=False))
@format_option
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Cap on each probe's max_tokens (a log's records; a TOML suite keeps its own).")
@click.option("--json", "as_json", is_flag=True, help="Print the probes and dropped records as JSON.")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True, help="Probes listed (the rest counted).")
def show(file: str, fmt: str | None, max_tokens: int, as_json: bool, limit: int) -> None:
    """What a suite holds (any supported format): its probes, and every record that does not load.

    \b
    observatory suite show suite.toml
    observatory suite show gateway.jsonl --format openai --json
    """
    read = _read(file, fmt, max_tokens)
    if as_json:
        click.echo(json.dumps({"path": read.path, "format": read.format, "how": read.how, "records": read.records,
                               "probes": [p.to_dict() for p in read.probes],
                               "dropped": [{"where": d.where, "kind": d.kind, "why": d.why} for d in read.dropped],
                               "notes": read.notes}, ensure_ascii=False, indent=1))
        return
    _echo(read.headline())
    cats = Counter(p.category for p in read.probes)
    _echo("categories: " + ", ".join(f"{c} {n}" for c, n in sorted(cats.items())))
    sampled = sum(1 for p in read.probes if p.original.get("temperature"))
    unset = sum(1 for p in read.probes if p.original and "temperature" not in p.original)
    if sampled or unset:
        _echo(f"{sampled} request(s) set temperature > 0 and {unset} set none (the server's default applied): the "
              "correctness pass sends every probe greedily; their own sampling fields are kept (docs/probes.md)")
    width = min(40, max((len(p.name) for p in read.probes[:limit]), default=4))
    for p in read.probes[:limit]:
        _echo(f"  {printable(p.name)[:width]:<{width}}  {p.category:<10} {p.kind:<10} max {p.max_tokens:<6} "
              f"{_preview(p)}")
    if len(read.probes) > limit:
        _echo(f"  ... and {len(read.probes) - limit} more probe(s)")
    _drops(read.dropped, read.notes, SHOW)


@suite.command(name="check")
@click.argument("file", type=click.Path(dir_okay=False))
@format_option
def check(file: str, fmt: str | None) -> None:
    """Validate a suite (any supported format): exit 0 when every record loads, 1 when any does not.

    A request logged twice is kept once and does not fail the check.

    \b
    observatory suite check probes/generic.toml
    observatory suite check traffic.jsonl
    """
    read = _read(file, fmt, DEFAULT_MAX_TOKENS)
    _echo(read.headline())
    _drops(read.dropped, read.notes, sys.maxsize)
    bad = [d for d in read.dropped if d.kind != "duplicate"]  # a request logged twice is kept once, not a fault
    verdict = FAIL if bad else PASS
    _echo(f"{verdict}: {len(read.probes)} probe(s) load" + (f", {len(bad)} record(s) do not" if bad else "")
          + (f", {len(read.dropped) - len(bad)} duplicate(s) kept once" if len(read.dropped) > len(bad) else ""))
    sys.exit(EXIT[verdict])
