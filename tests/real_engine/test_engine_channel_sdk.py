"""Channel ``sdk`` on the real CPU engine (issue 28 item 7): the openai SDK as a conformance judge.

One gate session (tests/fixtures/sdk_tiny.toml: one chat and one text-completion
probe, streamed, whole and batched), three arms:

- base and mtp1: the clean controls: the SDK accepts every answer, reads it as
  the lean reader did, and each stream accumulates to the whole answer;
- ``mtp1+fault=sdk_object``: streamed chunks of a speculative step carry a
  wrong ``object`` type (observatory/faults/field_sdk.py). The lean reader
  reads the stream as before (the suite's gates pass the arm), the SDK
  rejects it (``sdk`` FAILs with its ValidationError) and its chat stream
  helper drops those chunks (``sdk:stream`` FAILs: the stream accumulates to
  less text than the whole answer).

Three engine starts: 8 min on this 2-core machine at a load average of about
10 (2026-12-01), 11.5 min at 15-30; about 5 min idle (77-99 s per start). Over
the default suite's budget for one module, so it is a ``field_engine`` test,
as the other channels' engine tests are (docs/channels.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES

pytestmark = [pytest.mark.field_engine, requires_engine]
SUITE = FIXTURES / "sdk_tiny.toml"
FAULTED = "mtp1+fault=sdk_object"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sdk")
    db = tmp / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--channels", "sdk", "--arms", f"base,mtp1,{FAULTED}",
                                 "--suite", str(SUITE), "--db", str(db), "--log-dir", str(tmp / "logs"),
                                 "--report", str(tmp / "report"), "--engine-arg=--enforce-eager", "--quiet"],
                           catch_exceptions=False)
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        verdicts = {n: store.verdicts(a.id) for n, a in arms.items()}
        results = {n: store.results(a.id) for n, a in arms.items()}
    return {"exit": r.exit_code, "output": r.output, "arms": arms, "verdicts": verdicts, "results": results,
            "report": (tmp / "report" / "index.html").read_text(encoding="utf-8")}


def channel(s: dict[str, Any], arm: str) -> dict[str, Any]:
    return {v.gate: v for v in s["verdicts"][arm] if v.gate.split(":")[0] == "sdk"}


def test_every_arm_ran_and_every_correctness_answer_carries_the_sdks_verdict(session: dict[str, Any]) -> None:
    assert all(a.status == "ok" for a in session["arms"].values()), {n: a.reason for n, a in session["arms"].items()}
    for name, results in session["results"].items():
        judged = [r for r in results if r.mode != "timed"]
        assert judged and all(r.sdk is not None for r in judged), name
        assert all(r.sdk is None for r in results if r.mode == "timed"), name


def test_the_clean_arms_pass(session: dict[str, Any]) -> None:
    for arm in ("base", "mtp1"):
        v = channel(session, arm)
        assert v["sdk"].verdict == "PASS", (arm, v["sdk"].reason, v["sdk"].details.get("table"))
        assert v["sdk:stream"].verdict == "PASS", (arm, v["sdk:stream"].reason)
        assert v["sdk:stream"].details["compared"] == 2


def test_the_fault_fails_the_channel_by_the_sdks_error_while_the_lean_reader_reads_it(session: dict[str, Any]) -> None:
    v = channel(session, FAULTED)
    assert v["sdk"].verdict == "FAIL", v["sdk"].reason
    assert "ValidationError" in v["sdk"].reason and "object" in v["sdk"].reason
    kinds = {(row["request"], row["problem"]) for row in v["sdk"].details["table"]}
    assert ("stream", "rejected") in kinds and all(row["base"] == "clean" for row in v["sdk"].details["table"])
    assert not any(r.sdk.get("error") for r in session["results"][FAULTED] if r.mode == "nonstream")
    assert v["sdk:stream"].verdict == "FAIL", v["sdk:stream"].reason  # the chat helper dropped those chunks
    # the suite's gates, token diff included, read the same stream and pass the arm
    suite_fails = [(x.gate, x.reason) for x in session["verdicts"][FAULTED]
                   if x.verdict == "FAIL" and x.gate.split(":")[0] not in ("sdk", "speed", "speedup")]
    assert not suite_fails, suite_fails
    assert any(x.gate == "token_diff" and x.verdict == "PASS" for x in session["verdicts"][FAULTED])
    assert "The openai SDK as a conformance judge" in session["report"]
