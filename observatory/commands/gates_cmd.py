"""`observatory gates list|check` and `observatory calibrate degeneracy`.

``gates check`` runs a gate's ``@offline`` adapter over a JSONL file: one JSON
object per line in, one JSON verdict per line out, in order. All lines are
judged before anything is printed, so a bad line gives an error naming its
number and no partial output. Blank lines are skipped (but counted).

``calibrate degeneracy`` reads two JSONL files of ``{"text": ...}`` objects
(JSONL, not plain text: real outputs contain newlines; other keys are
ignored, so a ``gates check`` input file works as is) and scores them with the
degeneracy gate itself, so the numbers are the ones the gate judges by.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from observatory.judge.offline_gates import PERCENTILES, calibrate_degeneracy, check_lines
from observatory.model.errors import ObservatoryError
from observatory.model.gates import default_registry, registry_for
from observatory.model.safe_read import MAX_FILE_BYTES, read_text


def _fmt(x: float) -> str:
    return f"{x:.3f}"


@click.group(name="gates")
def gates() -> None:
    """List the registered gates and run one over a JSONL file.

    \b
    observatory gates list
    observatory gates check degeneracy --input outputs.jsonl
    """


@gates.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per gate.")
@click.option("--gates-dir", "gates_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also list the gate files (*.py) of this folder. Repeatable.")
def gates_list(as_json: bool, gates_dirs: tuple[str, ...]) -> None:
    """Show every gate: name, kind, purpose, version, description.

    \b
    observatory gates list
    observatory gates list --gates-dir my_gates/
    observatory gates list --json | jq -r .name
    """
    rows = [
        {
            "name": g.name,
            "kind": g.kind,
            "correctness": g.correctness,
            "purpose": g.purpose,
            "applies": g.applies if g.kind == "result" else None,
            "version": g.version,
            "path": g.path,
            "description": g.description,
        }
        for g in registry_for(gates_dirs)
    ]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    width = max(len(r["name"]) for r in rows)
    click.echo(f"{'NAME':<{width}}  KIND    PURPOSE      VERSION       DESCRIPTION")
    for r in rows:
        click.echo(
            f"{r['name']:<{width}}  {r['kind']:<6}  {r['purpose']:<11}  {r['version']:<12}  {r['description']}"
        )


@gates.command(name="check")
@click.argument("name")
@click.option(
    "--input",
    "input_file",
    type=click.Path(exists=True, allow_dash=True),
    required=True,
    help="JSONL file, one input object per line ('-' for stdin).",
)
def gates_check(name: str, input_file: str) -> None:
    """Run gate NAME's offline adapter on each line of a JSONL file.

    Prints one JSON verdict per input line, in order.

    \b
    observatory gates check degeneracy --input outputs.jsonl
    echo '{"text": "5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5"}' | \\
        observatory gates check degeneracy --input -
    """
    g = default_registry().get(name)
    for verdict in check_lines(g, _input_lines(input_file), "<stdin>" if input_file == "-" else input_file):
        click.echo(json.dumps(verdict, ensure_ascii=False))


def _input_lines(input_file: str) -> list[str]:
    """The lines of `gates check --input`: a regular file of at most MAX_FILE_BYTES, or stdin ('-')."""
    if input_file != "-":
        return read_text(Path(input_file), ObservatoryError, "JSONL input file").splitlines()
    data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ObservatoryError(f"<stdin>: over the {MAX_FILE_BYTES} bytes a JSONL input may have")
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ObservatoryError(f"<stdin>: not UTF-8 text ({e})") from None


@click.group(name="calibrate")
def calibrate() -> None:
    """Calibrate gate thresholds on labelled outputs.

    \b
    observatory calibrate degeneracy --healthy ok.jsonl --degenerate bad.jsonl
    """


@calibrate.command(name="degeneracy")
@click.option(
    "--healthy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help='JSONL of healthy outputs, {"text": ...} per line.',
)
@click.option(
    "--degenerate",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help='JSONL of degenerate outputs, {"text": ...} per line.',
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def calibrate_degeneracy_cmd(healthy: Path, degenerate: Path, as_json: bool) -> None:
    """Score healthy and degenerate outputs; show both distributions and their separation.

    Outputs too short to score (under 20 non-whitespace characters) and empty
    ones are counted but left out of the distributions.

    \b
    observatory calibrate degeneracy --healthy ok.jsonl --degenerate bad.jsonl
    observatory calibrate degeneracy --healthy ok.jsonl --degenerate bad.jsonl --json
    """
    res = calibrate_degeneracy(healthy, degenerate)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo("degeneracy score: distinct / total character 3-grams, whitespace removed")
    for label in ("healthy", "degenerate"):
        d = res[label]
        pcts = "  ".join(f"p{q}={_fmt(d[f'p{q}'])}" for q in PERCENTILES)
        click.echo(
            f"{label:<10}  n={d['n']:<4}  min={_fmt(d['min'])}  {pcts}  max={_fmt(d['max'])}"
            f"  (not scored: {d['unscored']['short']} short, {d['unscored']['empty']} empty)"
        )
    h_min, d_max, t = res["healthy"]["min"], res["degenerate"]["max"], res["threshold"]
    ratio = "infinite (degenerate max is 0)" if res["ratio"] is None else f"{res['ratio']:.1f}x"
    click.echo(f"separation: healthy min / degenerate max = {ratio}")
    if res["separates"]:
        click.echo(
            f"threshold {t:.2f} separates them: yes "
            f"(degenerate max {d_max:.3f} < {t:.2f} <= healthy min {h_min:.3f})"
        )
    else:
        click.echo(
            f"threshold {t:.2f} separates them: no ({res['healthy_below']} healthy below "
            f"{t:.2f}, {res['degenerate_at_or_above']} degenerate at or above)"
        )
