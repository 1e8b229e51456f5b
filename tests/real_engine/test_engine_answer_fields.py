"""The whole answer, every field (issue 28 item 2) on the real CPU engine: one gate session, four arms.

- base and ``mtp2``: the clean controls. Every identity inside each answer
  holds (ids == usage == logprob entries, greedy top-1, the engine's own
  generated-token counter), and mtp2's answer equals base's field by field;
- ``mtp2+fault=usage_overcount`` (usage one higher on answers with an
  accepted speculative run, ids intact): ``answer_identities`` and
  ``answer_usage`` FAIL it by name (usage against the ids and the engine's
  counter), ``answer_fields`` on ``usage.completion_tokens``;
- ``mtp2+fault=logprob_shift`` (accepted positions get the next row's
  logprobs, ids intact): ``answer_fields`` FAILs it on the top-k sets while
  the token diff passes it.
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES

pytestmark = requires_engine
SUITE = FIXTURES / "channel_tiny.toml"
OVER, SHIFT = "mtp2+fault=usage_overcount", "mtp2+fault=logprob_shift"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("answer_fields")
    db = tmp / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--arms", f"base,mtp2,{OVER},{SHIFT}", "--suite", str(SUITE),
                                 "--db", str(db), "--log-dir", str(tmp / "logs"), "--report", str(tmp / "report"),
                                 "--no-diffs", "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        assert all(a.status == "ok" for a in arms.values()), {n: a.reason for n, a in arms.items()}
        out: dict[str, dict[str, Any]] = {}
        for name, arm in arms.items():
            out[name] = {v.gate: v for v in store.verdicts(arm.id)}
            out[name]["_stream"] = [r for r in store.results(arm.id) if r.mode == "stream"]
    return out


def test_the_clean_arms_keep_every_identity_and_agree_field_by_field(session: dict[str, dict[str, Any]]) -> None:
    for name in ("base", "mtp2"):
        v = session[name]
        assert v["answer_identities"].verdict == "PASS", (name, v["answer_identities"].reason)
        assert v["answer_usage"].verdict == "PASS", (name, v["answer_usage"].reason)
        (r,) = v["_stream"]
        assert r.stop_reason is None or isinstance(r.stop_reason, (int, str))
        assert len(r.logprobs) == len(r.token_ids) == r.usage["completion_tokens"] > 0
        assert r.counters_delta["generated"] == r.usage["completion_tokens"]  # the engine's own count
    fields = session["mtp2"]["answer_fields"]
    assert fields.verdict == "PASS", (fields.reason, fields.details["fields"])
    assert fields.details["fields"]["logprobs"].startswith("max difference")
    assert session["mtp2"]["token_diff"].verdict == "PASS"


def test_usage_overcount_is_caught_by_the_identities_and_the_session_sum(session: dict[str, dict[str, Any]]) -> None:
    v = session[OVER]
    assert v["answer_identities"].verdict == "FAIL" and "usage.completion_tokens" in v["answer_identities"].reason
    assert v["answer_usage"].verdict == "FAIL", v["answer_usage"].reason
    assert v["answer_fields"].verdict == "FAIL" and "usage.completion_tokens" in v["answer_fields"].details["failed"]
    # the ids are right (the token diff has no complete stream to diff: its usage says one token more)
    assert [r.token_ids for r in v["_stream"]] == [r.token_ids for r in session["base"]["_stream"]]
    (r,) = v["_stream"]
    assert r.usage["completion_tokens"] == len(r.token_ids) + 1 == r.counters_delta["generated"] + 1


def test_logprob_shift_is_caught_by_the_field_comparison(session: dict[str, dict[str, Any]]) -> None:
    v = session[SHIFT]
    f = v["answer_fields"]
    assert f.verdict == "FAIL" and "top_logprobs" in f.details["failed"], (f.reason, f.details["fields"])
    assert v["token_diff"].verdict == "PASS"  # the ids are right
    assert v["answer_usage"].verdict == "PASS"
