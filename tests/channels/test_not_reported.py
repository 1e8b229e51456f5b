"""What an engine does not report is "not reported by this engine", end to end (issue 31 item 5).

SGLang 0.5.14's /v1/completions carries no token ids (observatory.engines.sglang_ids). On the H200
three-engine night the length sweep sent its 260 completions to `sglang:base`, stored 260 failures
in 266 s (each one followed by a health wait) and judged base INVALID; and the seeds channel read
SGLang's chat answer with vLLM's id reader and raised, ending the whole session. Now: the answer is
a `NotReported` failure, the sweep stops at the first one, the judge says SKIP "not measurable" for
base and its spec arms, and the seeds channel stores what it could not read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from observatory.channels import length_sweep, seeds
from observatory.client.send import EngineClient
from observatory.model.errors import NOT_REPORTED
from observatory.model.probes import Probe
from observatory.model.vocabulary import BASE, FAIL, INVALID, PASS, SKIP, SPEC
from observatory.store.session_store import Store
from tests.support.channel_rows import channel_view, verdicts
from tests.support.paths import FIXTURES
from tests.support.sse_stub import SseStub, whole

FIXTURE = json.loads((FIXTURES / "engines/sglang_token_ids_reconstructed.json").read_text())
TEXT = Probe(name="t", category="prose_en", prompt="Once", max_tokens=4)


def _whole(body: Any) -> Any:
    """A stub script answering BODY whole."""
    return lambda req: whole(json.dumps(body).encode())


def _without_ids(body: Any) -> Any:
    body = json.loads(json.dumps(body))
    for c in body["choices"]:
        c.pop("token_ids", None)
        c.pop("meta_info", None)
    return body


def test_an_sglang_completion_without_ids_is_not_reported() -> None:
    """The failure names what the engine withholds, with its own kind (not `malformed`)."""
    with SseStub({"/v1/completions": _whole(_without_ids(FIXTURE["completion_whole"]))}) as stub:
        client = EngineClient(stub.url, timeout=10, engine="sglang")
        r = client.run(TEXT, stream=False)
        client.close()
    assert not r.ok and r.error_kind == "not_reported" and r.token_ids == []
    assert (r.error or "").startswith(NOT_REPORTED) and "return_token_ids" in (r.error or "")


class _Run:
    """The parts of a live arm the sweep's measure uses, the client real (over the stub)."""

    def __init__(self, client: EngineClient) -> None:
        self.client, self.live, self.arm, self.stored = client, True, None, []
        self.reporter = type("R", (), {"step": staticmethod(lambda *a: None)})()
        self.alive_checks = 0

    def store_result(self, probe: Probe, resp: Any, mode: str) -> None:
        self.stored.append(resp)

    def check_alive(self, resp: Any) -> None:
        self.alive_checks += 1


@pytest.mark.parametrize("ids", [False, True], ids=["sglang-without-ids", "control-with-ids"])
def test_the_length_sweep_stops_at_the_first_unreported_answer(ids: bool) -> None:
    """One request, not 260, where the engine reports no ids; the control (ids present) sends every length."""
    body = FIXTURE["completion_whole"] if ids else _without_ids(FIXTURE["completion_whole"])
    routes = {"/v1/completions": _whole(body), "/tokenize": _whole({"tokens": [5, 6, 7]})}
    with SseStub(routes) as stub:
        client = EngineClient(stub.url, timeout=10, engine="sglang")
        client._model = "m"
        run = _Run(client)
        probes = length_sweep.plan([])
        length_sweep.measure(run, probes)
        client.close()
    assert len(run.stored) == (len(probes) if ids else 1)
    assert all(r.ok for r in run.stored) if ids else run.stored[0].error_kind == "not_reported"


def _failed(text: str) -> dict[str, Any]:
    return {"ok": False, "error": text, "token_ids": [], "text": ""}


def _ok() -> dict[str, Any]:
    return {"ok": True, "token_ids": [1, 2, 3], "text": "abc", "finish_reason": "length"}


@pytest.mark.parametrize("base_error, expected", [
    (f"{NOT_REPORTED}: SGLang answered without choices[].token_ids", SKIP),
    ("HTTP 500: ", INVALID),  # negative control: a base that failed is not "not reported"
], ids=["not-reported", "control-http-500"])
def test_a_channel_whose_base_reports_nothing_is_skip(tmp_path: Path, base_error: str, expected: str) -> None:
    store = Store(str(tmp_path / "runs.db"))
    probes = length_sweep.plan([])[:3]
    view = channel_view(store, length_sweep.NAME, probes, [("base", BASE), ("mtp2", SPEC)],
                    lambda arm, p: [(0, _failed(base_error))])
    got = verdicts(view, length_sweep.judge)
    assert got[("base", length_sweep.NAME)][0] == expected
    if expected == SKIP:
        assert got[("base", length_sweep.NAME)][1].startswith(f"not measurable: {NOT_REPORTED}")
        assert got[("mtp2", length_sweep.NAME)][0] == SKIP  # never a verdict of its own from nothing
    store.close()


def test_a_spec_arm_that_withholds_what_base_reports_still_fails(tmp_path: Path) -> None:
    """Only base's silence makes SKIP: a spec arm not reporting what base reported is a FAIL."""
    store = Store(str(tmp_path / "runs.db"))
    probes = length_sweep.plan([])[:3]
    view = channel_view(store, length_sweep.NAME, probes, [("base", BASE), ("mtp2", SPEC)],
                    lambda arm, p: [(0, _ok() if arm == "base" else _failed(f"{NOT_REPORTED}: no ids"))])
    got = verdicts(view, length_sweep.judge)
    assert got[("base", length_sweep.NAME)][0] == PASS and got[("mtp2", length_sweep.NAME)][0] == FAIL
    store.close()


@pytest.mark.parametrize("ids", [True, False], ids=["sglang-meta-info", "sglang-without-ids"])
def test_seeds_n_reads_sglang_answers_with_sglangs_reader(ids: bool) -> None:
    """The n request's choices read with the engine's own id reader; an answer it cannot read is stored
    as a failure, never raised (it ended the H200 three-engine session)."""
    body = FIXTURE["chat_whole"] if ids else _without_ids(FIXTURE["chat_whole"])
    chat = Probe(name="c", category="prose_en", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                 sampling={"temperature": 0.8, "seed": 1})
    with SseStub({"/v1/chat/completions": _whole(body)}) as stub:
        client = EngineClient(stub.url, timeout=10, engine="sglang")
        client._model = "m"
        outs = seeds.run_n(client, chat, 2)
        client.close()
    if ids:
        assert outs and all(o.ok and o.token_ids for o in outs)
    else:
        assert len(outs) == 1 and not outs[0].ok and outs[0].error_kind == "not_reported"
