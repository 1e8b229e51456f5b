"""Sessions run through the CLI against the STUB servers (support/stub_server.py): their suites and commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.db import ArmRow, SessionRow
from observatory.store.session_store import Store

TWO_PROBES = '''
[[probe]]
name = "one"
category = "prose_en"
messages = [{ role = "user", content = "Say something." }]
max_tokens = 8

[[probe]]
name = "two"
category = "prose_en"
messages = [{ role = "user", content = "Say something else." }]
max_tokens = 8
'''

THREE_PROBES = TWO_PROBES + """
[[probe]]
name = "three"
category = "prose_en"
messages = [{ role = "user", content = "Say a third thing." }]
max_tokens = 8
"""

# vLLM's spec counters as /metrics serves them, for a STUB's `metrics`
SPEC_COUNTERS = (
    "# TYPE vllm:spec_decode_num_drafts_total counter\n"
    "vllm:spec_decode_num_drafts_total {drafts}\n"
    "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
    "vllm:spec_decode_num_draft_tokens_total {tokens}\n"
    "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
    "vllm:spec_decode_num_accepted_tokens_total {accepted}\n"
)


def tiny_suite(tmp_path: Path) -> str:
    """The two-probe suite (TWO_PROBES) written under TMP_PATH; its path."""
    f = tmp_path / "p.toml"
    f.write_text(TWO_PROBES)
    return str(f)


def moving_counters() -> list[str]:
    """/metrics texts whose spec counters grow on every read (a speculating arm, for the stub)."""
    return [SPEC_COUNTERS.format(drafts=10 * i, tokens=20 * i, accepted=15 * i) for i in range(400)]


def run_gate(tmp_path: Path, arms: str, *extra: str) -> tuple[int, Path, str]:
    """`observatory gate` of ARMS on the tiny suite, every artefact under TMP_PATH/out: (exit code, out, output)."""
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(tmp_path / "g.db"),
                                 "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
                                 "--json", str(out / "session.json"), "--no-diffs", "--quiet", *extra])
    return r.exit_code, out, r.output


def compare_ok(tmp_path: Path, url: str, *extra: str) -> tuple[str, Any]:
    """`observatory compare` of one URL arm on the tiny suite, which must exit 0: (database, click's result)."""
    db = str(tmp_path / "r.db")
    r = CliRunner().invoke(cli, ["compare", "--arms", f"base={url}", "--suite", tiny_suite(tmp_path), "--db", db,
                                 "--no-diffs", "--quiet", *extra])
    assert r.exit_code == 0, r.output
    return db, r


def interrupt_arm(db: str) -> None:
    """Leave the session as an interrupted run leaves it: its arm to run again."""
    with Store(db) as store:
        (arm,) = store.arms(1)
        store.update(ArmRow, arm.id, status="interrupted")
        store.update(SessionRow, 1, status="interrupted")
