"""`gates list`, `gates check` and `calibrate degeneracy` through click (issue 4)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from observatory.commands.gates_cmd import calibrate, gates
from observatory.model.errors import ObservatoryError

HEALTHY = [
    "北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心，有三千多年的建城史。",
    "The French Revolution began in 1789 and reshaped European politics for decades.",
    "def add(a: int, b: int) -> int:\n    return a + b\n\nprint(add(2, 3))\n",
    '{"name": "Ada Lovelace", "born": 1815, "known_for": "first published algorithm"}',
]
DEGENERATE = [
    "2, 3, 5, " + ", ".join(["5"] * 40),
    "这个问题的答案是" * 20,
    "    return x + 1\n" * 15,
    "<think> Here's a thinking process: " * 10,
]


def jsonl(path: Path, objs: list) -> Path:
    path.write_text(
        "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), encoding="utf-8"
    )
    return path


def invoke(group: click.Group, args: list[str], **kw):
    return CliRunner().invoke(group, args, catch_exceptions=False, **kw)


def test_gates_list_table() -> None:
    result = invoke(gates, ["list"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "PURPOSE", "VERSION", "DESCRIPTION"]
    names = [line.split()[0] for line in lines[1:]]
    assert names == [
        "answer_fields",
        "answer_identities",
        "answer_usage",
        "answers",
        "content",
        "degeneracy",
        "distinct_outputs",
        "expect",
        "special_tokens",
        "token_diff",
        "tool_calls",
    ]
    token_diff = next(line for line in lines if line.startswith("token_diff"))
    assert token_diff.split()[1:3] == ["pair", "correctness"]


def test_gates_list_json() -> None:
    rows = [json.loads(line) for line in invoke(gates, ["list", "--json"]).output.splitlines()]
    by_name = {r["name"]: r for r in rows}
    assert set(by_name["degeneracy"]) == {"name", "kind", "correctness", "purpose", "applies", "version", "path", "description"}
    assert (by_name["degeneracy"]["kind"], by_name["degeneracy"]["correctness"]) == ("result", True)


def test_gates_check_prints_one_verdict_per_line_in_order(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "in.jsonl", [{"text": t} for t in [HEALTHY[0], DEGENERATE[1], "XXXXXXXX", ""]]
    )
    result = invoke(gates, ["check", "degeneracy", "--input", str(path)])
    assert result.exit_code == 0
    verdicts = [json.loads(line) for line in result.output.splitlines()]
    assert [v["verdict"] for v in verdicts] == ["PASS", "FAIL", "FAIL", "SKIP"]
    assert verdicts[1]["score"] < 0.40


def test_gates_check_token_diff_input_shape(tmp_path: Path) -> None:
    line = {
        "base": {
            "token_ids": [1, 2, 3],
            "top_logprobs": [[[1, -0.1]], [[2, -0.1], [7, -4.0]], [[3, -0.1]]],
        },
        "spec": {"token_ids": [1, 7, 3]},
    }
    path = jsonl(tmp_path / "pairs.jsonl", [line])
    (out,) = [
        json.loads(x)
        for x in invoke(gates, ["check", "token_diff", "--input", str(path)]).output.splitlines()
    ]
    assert (out["verdict"], out["kind"], out["position"]) == ("FAIL", "diverged", 1)
    assert out["margin"] == pytest.approx(3.9)


def test_gates_check_reads_stdin_and_skips_blank_lines() -> None:
    stdin = '\n{"text": "Paris."}\n\n{"text": ""}\n'
    result = invoke(gates, ["check", "content", "--input", "-"], input=stdin)
    assert [json.loads(x)["verdict"] for x in result.output.splitlines()] == ["PASS", "FAIL"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('{"text": "ok"}\n{"text": \n', "line 2: not valid JSON"),
        ('{"text": "ok"}\n\n[1, 2]\n', "line 3: expected a JSON object, got list"),
        ('{"text": "ok"}\n{"txt": "typo"}\n', 'line 2: expected {"text": "<output text>"}'),
    ],
    ids=["malformed-json", "not-an-object-after-blank-line", "adapter-rejects-shape"],
)
def test_gates_check_bad_line_names_its_number(tmp_path: Path, lines: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(lines, encoding="utf-8")
    with pytest.raises(ObservatoryError) as e:
        invoke(gates, ["check", "degeneracy", "--input", str(path)])
    assert str(e.value).startswith(f"{path} {message}")


def test_gates_check_bad_line_exits_non_zero_through_the_top_level_cli(tmp_path: Path) -> None:
    from observatory.cli import cli

    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["gates", "check", "degeneracy", "--input", str(path)])
    assert result.exit_code != 0
    assert "line 2: not valid JSON" in result.output
    assert '"verdict"' not in result.output  # no partial output before the error


def test_gates_check_unknown_gate() -> None:
    with pytest.raises(ObservatoryError, match="No gate named 'degeneration'"):
        invoke(gates, ["check", "degeneration", "--input", "-"], input="")


@pytest.mark.parametrize(
    "args",
    [["check", "degeneracy"], ["check", "degeneracy", "--input", "/no/such/file.jsonl"], ["check"]],
    ids=["missing-input", "missing-file", "missing-name"],
)
def test_gates_check_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(gates, args)
    assert result.exit_code == 2


def test_calibrate_degeneracy_separates(tmp_path: Path) -> None:
    healthy = jsonl(
        tmp_path / "ok.jsonl", [{"text": t, "arm": "base"} for t in HEALTHY + ["Paris."]]
    )
    degenerate = jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in DEGENERATE])
    result = invoke(
        calibrate, ["degeneracy", "--healthy", str(healthy), "--degenerate", str(degenerate)]
    )
    lines = result.output.splitlines()
    assert lines[1].startswith("healthy     n=4     min=")
    assert "(not scored: 1 short, 0 empty)" in lines[1]
    assert lines[2].startswith("degenerate  n=4     min=")
    assert lines[3].startswith("separation: healthy min / degenerate max = ")
    assert lines[4].startswith("threshold 0.40 separates them: yes")
    res = json.loads(
        invoke(
            calibrate,
            ["degeneracy", "--healthy", str(healthy), "--degenerate", str(degenerate), "--json"],
        ).output
    )
    assert res["separates"] is True
    assert res["threshold"] == 0.40
    assert res["healthy"]["n"] == 4 and res["degenerate"]["n"] == 4
    assert res["healthy"]["min"] <= res["healthy"]["p50"] <= res["healthy"]["max"]
    assert res["ratio"] == pytest.approx(res["healthy"]["min"] / res["degenerate"]["max"])


def test_calibrate_degeneracy_reports_overlap(tmp_path: Path) -> None:
    """A threshold that does not separate the two sets must say so (docs/design.md mistake 13)."""
    healthy = jsonl(tmp_path / "ok.jsonl", [{"text": t} for t in HEALTHY[:2] + [DEGENERATE[0]]])
    degenerate = jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in DEGENERATE[1:] + [HEALTHY[2]]])
    result = invoke(
        calibrate, ["degeneracy", "--healthy", str(healthy), "--degenerate", str(degenerate)]
    )
    assert result.output.splitlines()[-1] == (
        "threshold 0.40 separates them: no (1 healthy below 0.40, 1 degenerate at or above)"
    )


def test_calibrate_degeneracy_needs_scorable_outputs(tmp_path: Path) -> None:
    healthy = jsonl(tmp_path / "ok.jsonl", [{"text": "Paris."}])
    degenerate = jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in DEGENERATE])
    with pytest.raises(ObservatoryError, match="no output long enough to score"):
        invoke(
            calibrate, ["degeneracy", "--healthy", str(healthy), "--degenerate", str(degenerate)]
        )


def test_calibrate_degeneracy_bad_line(tmp_path: Path) -> None:
    healthy = tmp_path / "ok.txt"
    healthy.write_text("plain text is not accepted\n", encoding="utf-8")
    degenerate = jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in DEGENERATE])
    with pytest.raises(ObservatoryError, match="ok.txt line 1: not valid JSON"):
        invoke(
            calibrate, ["degeneracy", "--healthy", str(healthy), "--degenerate", str(degenerate)]
        )


def _commands(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")


COMMANDS = [
    ("gates", gates),
    ("calibrate", calibrate),
    *_commands(gates, "gates "),
    *_commands(calibrate, "calibrate "),
]


@pytest.mark.parametrize(("name", "cmd"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_command_has_help_with_an_example(name: str, cmd: click.Command) -> None:
    assert cmd.help and "\b" in cmd.help, f"{name} needs a docstring with a \\b example block"
    assert "observatory " in cmd.help
