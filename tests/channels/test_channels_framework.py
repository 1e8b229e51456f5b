"""Field channels' framework (issue 15): plan -> measure on each live arm -> judge -> report, through `gate`.

The servers are the hand-made STUB of tests/support/stub_answers.py: a server that
answers one kind of request differently on demand. The channel here is a
test channel registered for the test; the real channels have their own
tests, on stored results and on the real engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory import channels as channels_mod
from observatory.channels import Channel
from observatory.channels.view import ChannelView
from observatory.cli import cli
from observatory.client.send import request_params
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.session.measure import ArmRun
from observatory.store.db import VerdictRow
from tests.support.stub_answers import Answer, AnswerStub, fixed

SUITE = """
[[probe]]
name = "one"
category = "prose_en"
messages = [{ role = "user", content = "Say something." }]
max_tokens = 8
"""


def _plan(suite: list[Probe]) -> list[Probe]:
    return [Probe(name=f"echo.{p.name}", category=p.category, messages=p.messages, max_tokens=4, channel="echo",
                  sampling={"stop": ["\n\n"], "stop_token_ids": [7]}, meta={"of": p.name}) for p in suite]


def _measure(run: ArmRun, probes: list[Probe]) -> None:
    assert run.client is not None
    for p in probes:
        resp = run.client.run(p, stream=False)
        run.store_result(p, resp, "echo")
        run.check_alive(resp)


def _judge(view: ChannelView) -> list[VerdictRow]:
    base = view.base
    rows = []
    ref = {view.probe(r).name: r.text for r in view.results(base)} if base else {}
    for arm in view.arms:
        if arm is base:
            continue
        mine = {view.probe(r).name: r.text for r in view.results(arm)}
        if not ref:
            rows.append(view.verdict(arm, "UNJUDGED", "no base results"))
            continue
        bad = [{"probe": n, "text": t, "base": ref.get(n)} for n, t in mine.items() if t != ref.get(n)]
        rows.append(view.verdict(arm, "FAIL" if bad else "PASS", f"{len(bad)} of {len(mine)} differ from base",
                                 {"table": bad}))
    return rows


ECHO = Channel(name="echo", title="Echo test channel", catches="a test", plan=_plan, measure=_measure, judge=_judge)


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> None:
    channels_mod.channels()
    monkeypatch.setitem(channels_mod._REGISTRY, "echo", ECHO)


def _by_stop(normal: str, channel: str) -> Any:
    """Answer CHANNEL to the channel's requests (they carry a stop), NORMAL to the suite's."""
    return lambda req, in_flight: Answer(text=channel if req.get("stop") else normal, token_ids=[5])


def _gate(tmp_path: Path, arms: str, *extra: str) -> tuple[int, dict[str, Any], str, str]:
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    out, db = tmp_path / "out", tmp_path / "g.db"
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--suite", str(suite), "--db", str(db),
                                 "--report", str(out / "report"), "--junit", str(out / "junit.xml"), "--no-diffs",
                                 "--quiet", "--health-timeout", "5", "--request-timeout", "10", *extra])
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    return r.exit_code, json.loads(shown.output), (out / "report" / "index.html").read_text(), \
        (out / "junit.xml").read_text()


def test_channel_request_params_merge_over_greedy_defaults() -> None:
    """A channel probe's sampling parameters override the defaults; vLLM-only ones go in extra_body."""
    p = _plan([Probe(name="x", category="prose_en", messages=[{"role": "user", "content": "hi"}])])[0]
    params = request_params(p)
    assert params["stop"] == ["\n\n"] and params["temperature"] == 0.0
    assert params["extra_body"]["stop_token_ids"] == [7]
    assert p.greedy and not Probe(name="y", category="prose_en", prompt="a", sampling={"temperature": 1.0}).greedy


def test_suite_probe_hash_unchanged_by_channel_fields() -> None:
    """Adding the channel fields to Probe keeps every older probe's hash (so --resume of old sessions works)."""
    p = Probe(name="x", category="prose_en", prompt="a")
    d = p.to_dict()
    for k in ("channel", "sampling", "meta", "original"):  # "original": a logged request's fields (issue 48)
        d.pop(k)
    import hashlib
    d.pop("source")
    assert p.content_hash == hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def test_unknown_channel_and_profile_are_usage_errors(echo: None) -> None:
    with pytest.raises(ObservatoryError, match="unknown channel 'nope'.*echo"):
        channels_mod.resolve(None, "nope")
    with pytest.raises(ObservatoryError, match="--profile"):
        channels_mod.resolve("weekly")
    assert channels_mod.resolve("quick") == []
    assert "echo" in channels_mod.resolve("nightly")


def test_a_channel_difference_fails_the_session_and_is_reported(tmp_path: Path, echo: None) -> None:
    """Negative control: the arms agree on the suite, differ only on the channel's requests: FAIL, named."""
    with AnswerStub(_by_stop("same", "reference")) as a, AnswerStub(_by_stop("same", "broken <b>")) as b:
        code, data, html, junit = _gate(tmp_path, f"base={a.url},mtp1={b.url}", "--channels", "echo")
    assert code == 1, data["verdict"]
    assert [c["name"] for c in data["channels"]] == ["echo"]
    assert [p["name"] for p in data["probes"]] == ["one"]  # channel probes stay out of the probe matrix
    mtp1 = next(a for a in data["channels"][0]["arms"] if a["arm"] == "mtp1")
    assert mtp1["verdicts"]["echo"]["verdict"] == "FAIL"
    assert any(r["code"] == "CHANNEL" and r["level"] == "FAIL" and r["arm"] == "mtp1"
               for r in data["verdict"]["reasons"])
    assert 'id="channel-echo"' in html and "broken &lt;b&gt;" in html and "broken <b>" not in html
    assert 'classname="channel.echo" name="mtp1"' in junit and "<failure" in junit


def test_agreeing_arms_pass_the_channel(tmp_path: Path, echo: None) -> None:
    """Clean control: the same answers everywhere: the channel passes and adds no reason."""
    with AnswerStub(fixed("same")) as a, AnswerStub(fixed("same")) as b:
        _, data, _, _ = _gate(tmp_path, f"base={a.url},mtp1={b.url}", "--channels", "echo")
    mtp1 = next(a for a in data["channels"][0]["arms"] if a["arm"] == "mtp1")
    assert mtp1["verdicts"]["echo"]["verdict"] == "PASS"
    assert not any(r.get("code") == "CHANNEL" for r in data["verdict"]["reasons"])


def test_selftest_nightly_adds_each_channels_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 item 12: selftest's fault list is the suite's plus each channel's, each with the channel that must catch it."""
    from dataclasses import replace

    from observatory.session.fault_selftest import FAULTS, Catcher, fault_plan

    channels_mod.channels()
    monkeypatch.setitem(channels_mod._REGISTRY, "echo", replace(ECHO, faults=("ghost_batch",)))
    assert fault_plan("quick", None) == {f: Catcher("suite") for f in FAULTS}
    plan = fault_plan(None, "echo")
    assert plan["ghost_batch"] == Catcher("channel", "echo") and all(plan[f] == Catcher("suite") for f in FAULTS)


def test_every_channel_names_the_faults_selftest_injects_for_it() -> None:
    """Issue 15 item 12: selftest --profile nightly injects each channel's own fault (history needs earlier nights)."""
    from observatory.faults import FAULTS as KNOWN
    from observatory.session.fault_selftest import LOSSY, fault_plan

    plan = fault_plan("nightly", None)
    assert {plan[f].name for f in ("soak_poison", "length_poison", "batch_swap", "past_stop", "inflate_accepted",
                                   "biased_accept", "logprob_row", "seed_ignored")} == {
        "soak", "length_sweep", "mixed_batch", "finish", "counters", "sampling", "teacher", "seeds"}
    # every planned fault is an injected one, except the lossy control (an arm's launch, not an injection)
    assert all(f in KNOWN for f in plan if f != LOSSY) and plan[LOSSY].kind == "validity"


def test_report_draws_a_channel_table_whose_rows_have_different_keys(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (H200 nightly, hybrid model): a row with a key the first row lacks crashed the report."""
    def judge(view: ChannelView) -> list[VerdictRow]:
        table = [{"probe": "a"}, {"probe": "b", "finish": "not comparable <i>"}]
        return [view.verdict(a, "PASS", "ragged", {"table": table}) for a in view.arms if a is not view.base]

    channels_mod.channels()
    monkeypatch.setitem(channels_mod._REGISTRY, "echo", Channel(name="echo", title="Ragged", catches="a test",
                                                                 plan=_plan, measure=_measure, judge=judge))
    with AnswerStub(fixed("same")) as a, AnswerStub(fixed("same")) as b:
        _, _, html, _ = _gate(tmp_path, f"base={a.url},mtp1={b.url}", "--channels", "echo")
    assert "<th>finish</th>" in html and "not comparable &lt;i&gt;" in html
