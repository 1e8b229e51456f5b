"""What a new user and a CI maintainer trip on (issue 50 items 3, 4 and 7), each with its control.

Real stored sessions (the committed examples) where a real engine's output is
needed; the hand-made STUB server only to count the requests a refused gate
sent (none may reach a server before a read-only database is refused).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.paths import REPO, example_db
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


@pytest.fixture(scope="module")
def engines_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_db("h200-engines/h200-three-engines.db", tmp_path_factory.mktemp("e") / "e.db")


def _run(args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """ARGS in bash with pipefail, `observatory` being this tree's command line."""
    cmd = f"set -o pipefail; observatory() {{ {sys.executable} -m observatory.cli \"$@\"; }}; {args}"
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_a_closed_pipe_ends_quietly_with_the_commands_status(engines_db: Path) -> None:
    """`observatory sessions | head -1` exited 4 ("internal error ... this is a bug") under pipefail."""
    r = _run(f"observatory sessions --db {engines_db} | head -1; echo rc=$?")
    assert r.stdout.splitlines()[-1] == "rc=0", (r.stdout, r.stderr)
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    # the command's own status survives the closed pipe: a missing database is still exit 3
    r = _run(f"observatory show --db {engines_db}.missing | head -1; echo rc=$?")
    assert r.stdout.splitlines()[-1] == "rc=3", r.stdout


def test_output_that_is_not_a_terminal_is_not_wrapped(tmp_path: Path) -> None:
    db = example_db("cpu-fault-nights/nights.db", tmp_path / "n.db")
    r = CliRunner(env={"COLUMNS": None}).invoke(cli, ["show", "9", "--db", str(db)])  # as a CI log: no COLUMNS
    head = r.output.splitlines()[0]
    assert "model /" in head and head.rstrip().endswith("Z"), head  # the session line whole (it wrapped at 80)
    assert max(len(x) for x in r.output.splitlines()) <= 240
    narrow = CliRunner(env={"COLUMNS": "100"}).invoke(cli, ["show", "9", "--db", str(db)])
    assert max(len(x) for x in narrow.output.splitlines()) <= 100  # COLUMNS is obeyed


def test_history_fits_80_columns_whole(tmp_path: Path) -> None:
    db = example_db("cpu-fault-nights/nights.db", tmp_path / "n.db")
    r = _run(f"observatory history --db {db} --limit 6", COLUMNS="80")
    rows = [x for x in r.stdout.splitlines() if " 12-04 " in x]
    assert len(rows) == 12, r.stdout
    assert not any("…" in x for x in rows) and all(len(x) <= 80 for x in rows), r.stdout
    assert any("0.509  2.019" in x for x in rows)  # alpha and tau whole (they read 0.… and …)


def test_quiet_and_verbose(tmp_path: Path) -> None:
    """The H200 nightly: -q prints the verdict and its reasons without tables; every level's lines are capped by
    default (ten a level, "... and N more") and whole with -v."""
    from rich.console import Console

    from observatory.report.data import build
    from observatory.report.terminal import print_reasons
    from observatory.store.session_store import Store

    db = str(example_db("h200-nightly/nightly-tiny.db", tmp_path / "n.db"))
    assert CliRunner().invoke(cli, ["judge", "--db", db, "-q"]).exit_code == 0  # today's judge and built-in ledger
    quiet = CliRunner().invoke(cli, ["show", "-q", "--db", db])
    normal = CliRunner().invoke(cli, ["show", "--db", db])
    loud = CliRunner().invoke(cli, ["-v", "show", "--db", db])
    assert quiet.exit_code == normal.exit_code == loud.exit_code == 0
    assert "Verdict: " in quiet.output and "Probe x arm" not in quiet.output and "Probe x arm" in normal.output
    assert "KNOWN vllm-cuda-ids-past-stop" in quiet.output and "NOTE: " in quiet.output  # apart, never counted
    with Store(db) as store:
        view = build(store, store.session(None).id)
    capped, whole = Console(record=True, width=300), Console(record=True, width=300)
    print_reasons(view, capped, 1, 300)
    print_reasons(view, whole, 10_000, 300)
    assert "more (see the report)" in capped.export_text() and "more (see the report)" not in whole.export_text()


def test_no_terminal_escape_from_a_stored_name_reaches_the_terminal(tmp_path: Path) -> None:
    """A server's model name with OSC (window title, hyperlink) and CSI (clear screen) sequences, as stored."""
    db = example_db("cpu-fault-nights/nights.db", tmp_path / "n.db")
    evil = "/m/evil\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\link\x1b[2J\x9b31m"
    with sqlite3.connect(db) as c:
        c.execute("UPDATE sessions SET model = ?", (evil,))
        c.execute("UPDATE arms SET model = ?", (evil,))
    for args in (["history", "--out", str(tmp_path / "h")], ["sessions"], ["show"], ["history", "-v"]):
        r = _run("observatory " + " ".join(args) + f" --db {db}")
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout + r.stderr and "\x9b" not in r.stdout + r.stderr, args
        if args == ["sessions"]:
            assert "evil?]0;pwned" in r.stdout, r.stdout  # shown, made harmless
    # the control: a terminal gets rich's own colours, only the stored text is neutralised
    import io

    from rich.text import Text

    from observatory.report.console import SafeConsole

    out = io.StringIO()
    SafeConsole(file=out, force_terminal=True, width=80).print(Text(evil, style="red"))
    assert out.getvalue().startswith("\x1b[31m") and out.getvalue().count("\x1b") == 2


def test_a_read_only_database_is_refused_before_any_request(tmp_path: Path) -> None:
    db = tmp_path / "ro.db"
    with StubServer("ok") as s:
        ok = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                      "--db", str(db), "--no-diffs", "--quiet"])
        assert ok.exit_code == 0, ok.output
        sent = s.completions
        assert sent > 0  # the control: a writable database, requests sent
    ro = f"sqlite:///file:{db}?mode=ro&uri=true"
    with StubServer("ok") as s:
        r = CliRunner().invoke(cli, ["gate", "--db", ro, "--arms", f"base={s.url},mtp1={s.url}", "--suite",
                                     tiny_suite(tmp_path), "--report", str(tmp_path / "r")])
        assert r.exit_code == 3 and "read-only" in r.output, r.output
        assert s.completions == 0 and s.models_reads == 0 and s.metrics_reads == 0


def test_vs_names_the_plan_difference(tmp_path: Path) -> None:
    """Session 1 of the two-H200 example ran with --parallel-arms, session 2 without."""
    db = example_db("h200x2/h200x2-parallel.db", tmp_path / "p.db")
    r = CliRunner().invoke(cli, ["report", "1", "--vs", "2", "--db", str(db), "--out", str(tmp_path / "vs")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "vs" / "index.html").read_text()
    assert "plan parallel_arms (true vs false)" in page and "none recorded" not in page
    same = CliRunner().invoke(cli, ["report", "2", "--vs", "2", "--db", str(db), "--out", str(tmp_path / "x")])
    assert same.exit_code == 3  # the control: a session against itself is refused, not "no difference"


@pytest.mark.parametrize(("arms", "hint"), [("base,mpt2", "'mtp2'"), ("base,llama.cpp:draf2", "'llama.cpp:draft2'"),
                                            ("base,ngarm3", "'ngram3'")])
def test_did_you_mean_a_mistyped_arm(tmp_path: Path, arms: str, hint: str) -> None:
    r = CliRunner().invoke(cli, ["compare", "--arms", arms, "--db", str(tmp_path / "x.db")])
    assert r.exit_code == 3 and f"did you mean {hint}?" in r.output, r.output
    far = CliRunner().invoke(cli, ["compare", "--arms", "base,zzzz", "--db", str(tmp_path / "x.db")])
    assert far.exit_code == 3 and "did you mean" not in far.output  # the control: nothing close, no guess


def test_report_re_exports_what_ci_reads(engines_db: Path, tmp_path: Path) -> None:
    """JUnit (Jenkins-safe class names), metrics, JSON and the summary from a stored session, no HTML needed."""
    import xml.dom.minidom

    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    files = {k: tmp_path / n for k, n in (("junit", "j.xml"), ("metrics-out", "m.prom"), ("json", "s.json"),
                                          ("summary-md", "s.md"))}
    r = CliRunner().invoke(cli, ["report", "--db", str(engines_db), *[x for k, p in files.items()
                                                                       for x in (f"--{k}", str(p))]])
    assert r.exit_code == 0, r.output
    classes = {c.getAttribute("classname") for c in
               xml.dom.minidom.parse(str(files["junit"])).getElementsByTagName("testcase")}
    assert "arm.llama_cpp:draft2" in classes and not any(c.count(".") > 1 for c in classes), classes
    families = {f.name: f for f in text_string_to_metric_families(files["metrics-out"].read_text())}
    (code,) = families["observatory_exit_code"].samples
    # the three-engine H200 session: its FAILs are known engine bugs (KNOWN), and SGLang's MTP arm crashed mid-run,
    # so it is INVALID: exit 2, the same code the gate gives
    assert code.value == 2 and code.labels == {"model": "default_model"}  # by name, not the path
    engines = {s.labels["engine"] for s in families["observatory_arm_verdict"].samples}
    assert engines == {"llama.cpp", "vllm", "sglang"}
    assert not any("session" in s.labels for f in families.values() for s in f.samples)
    md = files["summary-md"].read_text()
    assert md.startswith("## ⛔ observatory: INVALID (exit 2)") and "| llama\\.cpp:draft2 |" in md
    nothing = CliRunner().invoke(cli, ["report", "--db", str(engines_db)])
    assert nothing.exit_code == 3 and "Nothing to write" in nothing.output


def test_markdown_escapes_stored_text() -> None:
    from observatory.report.markdown import md

    assert md("<script>alert(1)</script> | [x](javascript:y) *b*\n\x1b[2J") == (
        "&lt;script&gt;alert\\(1\\)&lt;/script&gt; \\| \\[x\\]\\(javascript:y\\) \\*b\\* \\[2J")


@pytest.mark.parametrize(("code", "case"), [(3, "setup"), (4, "internal"), (5, "storage"), (130, "interrupted")])
def test_every_early_exit_leaves_ci_its_files(tmp_path: Path, code: int, case: str) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from observatory.report.ci_files import CiFiles

    files = CiFiles.best_effort(str(tmp_path / "j.xml"), str(tmp_path / "m.prom"), None, str(tmp_path / "s.md"))
    files.write_failure(code, "what went wrong \x1b[2J", "/models/m")
    junit = (tmp_path / "j.xml").read_text()
    assert f'classname="session" name="{case}"' in junit and "<failure" in junit and "\x1b" not in junit
    import xml.dom.minidom

    xml.dom.minidom.parseString(junit)  # well-formed
    (sample,) = next(f for f in text_string_to_metric_families((tmp_path / "m.prom").read_text())
                     if f.name == "observatory_exit_code").samples
    assert sample.value == code and sample.labels == {"model": "m"}
    assert f"(exit {code})" in (tmp_path / "s.md").read_text()
    # a path that is itself the problem is left out, the others still written
    bad = CiFiles.best_effort(str(tmp_path / "no" / "j.xml"), str(tmp_path / "m2.prom"))
    assert bad.junit is None and bad.metrics is not None
