"""Hostile servers and inputs, round three: variations of issue 32's cases found from outside.

Each was tried through the CLI against the hand-made STUB servers of
tests/support/stub_server.py (a real engine cannot echo a key lower-cased, serve a
50 MB /metrics or a token id of 23 digits on demand) and failed before its
fix; here each is pinned at the narrowest level that shows it (cheap: about
ten seconds in all on an idle core), with a control beside it.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite

KEY = "sk-round3-9f8e7d6c5b4a"


@pytest.fixture(autouse=True)
def _forget() -> object:
    from observatory.model.redact import forget_all

    forget_all()
    yield
    forget_all()


# -- secrets in new forms -----------------------------------------------------------------------------

def test_a_remembered_value_is_masked_in_any_case_and_escaped_form() -> None:
    """A server echoing ``basic DXNL...`` lower- or upper-cased, or a key with a quote JSON-escaped in a raw
    error body, kept the key recoverable; the control: other text is left alone."""
    from observatory.model.redact import redact_pieces, redact_text, remember, remember_url

    user = "userkeyonly123456"
    remember_url(f"http://{user}@host:1")
    basic = base64.b64encode(f"{user}:".encode()).decode()
    quoted = 'sk-with"quote/slash\\x'
    remember(quoted)
    text = (f"bad: basic {basic.lower()} / BASIC {basic.upper()} / {user.upper()} / {json.dumps(quoted)} / "
            f"caf\u00e9 {quoted.upper()} / plain words")
    masked = redact_text(text)
    for form in (basic.lower(), basic.upper(), user.upper(), json.dumps(quoted)[1:-1], quoted.upper()):
        assert form not in masked, (form, masked)
    assert masked.endswith("/ plain words") and masked.startswith("bad: basic ***")
    pieces = [basic[:3].lower(), basic[3:].lower(), " ok"]
    assert "".join(redact_pieces(pieces)) == "*** ok"


def test_a_credential_in_a_url_query_is_masked_wherever_a_url_appears() -> None:
    """`base=http://host:port/?api_key=KEY` stored the key in the arm's URL, the report and the JSON."""
    from observatory.model.redact import redact_text, remember_url

    remember_url(f"http://127.0.0.1:8000/?api_key={KEY}&mode=fast")
    assert KEY not in redact_text(f"echoed {KEY} back")
    other = "see postgresql://h/db?sslmode=require&password=hunter2secret;token=abcdefgh#x and http://a/?q=1"
    assert redact_text(other) == ("see postgresql://h/db?sslmode=require&password=***;token=***#x and "
                                  "http://a/?q=1")


def test_a_key_in_a_url_query_reaches_no_stored_file(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url}/?api_key={KEY}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--quiet", "--no-diffs", "--report", str(out / "report"),
                                     "--json", str(out / "s.json"), "--junit", str(out / "j.xml")])
    assert r.exit_code in (0, 1, 2), r.output
    leaked = [p for p in [db, *tmp_path.glob("q.db*"), *out.rglob("*")] if p.is_file() and KEY.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert "api_key=***" in (out / "s.json").read_text()


# -- counters: a /metrics of megabytes --------------------------------------------------------------------

def test_metrics_of_megabytes_make_the_counters_unusable_not_the_session_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 50 MB /metrics went through the Prometheus parser three times per read, around every request: the
    gate ran past 120 s. Now only the lines naming the families read are parsed, and a body over
    MAX_METRICS_BYTES makes the counters unusable at once (the arm is not crashed)."""
    import observatory.engines.metrics as metrics
    from observatory.client.send import EngineClient
    from observatory.engines.metrics import MAX_METRICS_BYTES, lines_naming, parse_spec_counters

    parsed: list[int] = []
    real = metrics.text_string_to_metric_families

    def counting(text: str) -> object:
        parsed.append(len(text))
        return real(text)

    monkeypatch.setattr(metrics, "text_string_to_metric_families", counting)

    good = ('# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total{engine="0"} 4\n'
            '# TYPE vllm:spec_decode_num_draft_tokens counter\nvllm:spec_decode_num_draft_tokens_total 8\n'
            '# TYPE vllm:spec_decode_num_accepted_tokens counter\nvllm:spec_decode_num_accepted_tokens_total 5\n')
    junk = "".join(f'junk{{i="{i}"}} 1\n' for i in range(200_000))
    assert lines_naming(junk, "vllm:spec_decode_") == ""
    c = parse_spec_counters(junk + good + junk)
    assert (c.drafts, c.draft_tokens, c.accepted, c.problem) == (4, 8, 5, None)
    assert parsed == [len(good)]  # the parser saw the spec families' lines only, not 7 MB of others
    big = good + "x_filler 1\n" * (MAX_METRICS_BYTES // 11 + 1)
    with StubServer("ok", metrics=[big]) as s:
        client = EngineClient(s.url, timeout=10)
        got = client.counters()
        client.close()
    assert got.problem is not None and "over" in got.problem and got.drafts is None


# -- answers out of range ----------------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["token_id:99999999999999999999999", "token_id:2147483648", "token_id:\u0663",
                                   "token_id:-1", "token_id:"])
def test_token_ids_out_of_range_are_malformed(token: str) -> None:
    """A 23-digit id was taken (and stored) as an ordinary token; "٣" (an Arabic-Indic digit) read as 3."""
    from observatory.client.answer import MAX_TOKEN_ID, item_token_id, parse_token_id
    from observatory.model.errors import ObservatoryError

    with pytest.raises(ObservatoryError):
        parse_token_id(token)
    with pytest.raises(ObservatoryError):
        item_token_id({"id": MAX_TOKEN_ID + 1})
    assert parse_token_id(f"token_id:{MAX_TOKEN_ID}") == MAX_TOKEN_ID  # the control: the largest id is taken


def test_json_nested_too_deep_is_a_malformed_answer() -> None:
    """An answer nested 50,000 deep raised RecursionError out of the decoder (an internal error, exit 4)."""
    from observatory.client.sse import MalformedStream, decode_json

    with pytest.raises(MalformedStream, match="too deep"):
        decode_json(b'{"choices": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
    with pytest.raises(MalformedStream):
        decode_json(b'{"x": NaN, "y": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")  # the slow path too
    assert decode_json(b'{"x": NaN}')["x"] != 0  # the control: NaN still decodes there


def test_tool_calls_nested_or_mistyped_are_malformed_not_stored() -> None:
    """A whole answer's tool call nested 900 deep decoded (under msgspec's limit) and went to the store,
    whose masking and JSON encoding recurse; an id that is an object was stored as one."""
    from observatory.client.answer import Response, finish

    deep: object = []
    for _ in range(900):
        deep = [deep]
    for calls in ([{"id": "c", "function": {"name": "f", "arguments": "{}"}, "deep": deep}],
                  [{"id": {"x": 1}, "function": {"name": "f", "arguments": "{}"}}], "not a list",
                  [{"id": "c", "function": "f"}]):
        out = finish(Response(finish_reason="tool_calls", tool_calls=calls), time.perf_counter())  # type: ignore[arg-type]
        assert out.error_kind == "malformed" and out.tool_calls is None, calls
    ok = finish(Response(finish_reason="tool_calls", tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": [[1]]}'}}]), time.perf_counter())
    assert ok.error is None and ok.tool_calls


# -- hostile files --------------------------------------------------------------------------------------

def test_a_suite_of_100000_probes_is_refused_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100,000 probes (5 MB, under the size bound) took minutes to load and would run for hours: past the
    test's timeout, a hang to CI. Over MAX_PROBES is one line, exit 3, before any database is made (the
    bound lowered here to keep the test cheap)."""
    import observatory.model.probes as probes
    from observatory.model.probes import load_probe_file

    assert probes.MAX_PROBES == 10_000
    monkeypatch.setattr(probes, "MAX_PROBES", 20)
    MAX_PROBES = 20

    one = '[[probe]]\nname = "p{i}"\ncategory = "prose_en"\nprompt = "x"\nmax_tokens = 1\n'
    f = tmp_path / "many.toml"
    f.write_text("".join(one.format(i=i) for i in range(MAX_PROBES + 1)))
    db = tmp_path / "m.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "base=http://127.0.0.1:9", "--suite", str(f), "--db", str(db),
                                 "--quiet"])
    assert r.exit_code == 3, r.output
    assert f"{MAX_PROBES + 1} probes, over the {MAX_PROBES}" in r.output and not db.exists()
    f.write_text("".join(one.format(i=i) for i in range(3)))
    assert len(load_probe_file(f)) == 3  # the control


# -- comparisons across what differs ---------------------------------------------------------------------

def test_report_vs_names_an_arm_whose_k_engine_or_dtype_differs(tmp_path: Path) -> None:
    """`report --vs` named a different model, but not one arm name run with another k, another engine or
    another dtype in the other session ("Differences between these sessions: none recorded")."""
    import sqlite3

    from observatory.report.data import build
    from observatory.report.html import render_cross
    from observatory.store.session_store import Store
    from tests.support.judged_sessions import make_session

    db = tmp_path / "runs.db"
    store = Store(str(db))
    first, second, control = make_session(store), make_session(store), make_session(store)
    con = sqlite3.connect(db)
    launch = json.loads(con.execute("SELECT launch FROM arms WHERE session_id = ? AND name = 'mtp1'",
                                    (second,)).fetchone()[0])
    launch.update(speculative_config={"method": "mtp", "num_speculative_tokens": 3}, engine="llama.cpp",
                  argv=[*launch["argv"], "--dtype", "float16"])
    con.execute("UPDATE arms SET launch = ? WHERE session_id = ? AND name = 'mtp1'", (json.dumps(launch), second))
    con.commit()
    con.close()
    store = Store(str(db))
    html = render_cross(build(store, first), build(store, second), tmp_path / "x").read_text()
    for what in ("arm mtp1: engine (vllm vs llama.cpp)", "arm mtp1: speculative config", "arm mtp1: dtype (None vs float16)"):
        assert what in html, what
    same = render_cross(build(store, first), build(store, control), tmp_path / "y").read_text()
    assert "arm mtp1:" not in same  # the control: the same launches name nothing


@pytest.mark.parametrize("flag", [["--concurrency", "99999999999"], ["--concurrency", "1,4097"], ["--repeat", "100000"]])
def test_a_concurrency_or_repeat_beyond_any_host_is_a_setup_error(tmp_path: Path, flag: list[str]) -> None:
    """--concurrency 99999999999 was taken: the session stayed running, building a batch of that size."""
    db = tmp_path / "c.db"
    with StubServer("ok", token=5) as s:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--quiet", *flag])
    assert r.exit_code == 3, r.output
    assert "1..4096" in r.output and not db.exists()


def test_the_preflight_request_survives_an_answer_nested_too_deep() -> None:
    """The one-token request before anything is stored read its answer with json (RecursionError on 50,000
    levels: an internal error, exit 4); the answer is the session's to record as malformed."""
    from observatory.session.preflight import missing_flag
    from tests.support.sse_stub import SseStub, whole

    deep = b'{"choices": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    with SseStub({"/v1/chat/completions": lambda req: whole(deep)}) as stub:  # type: ignore[dict-item]
        assert missing_flag(stub.url, None) is None
