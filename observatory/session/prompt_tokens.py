"""Each probe's rendered prompt as a live base arm's server tokenizes it, stored for the judge (issue 47 item 3).

A session whose arms run on more than one engine compares the engines' bases
apart from every verdict (`observatory.judge.cross_engine`), and first asks
whether they tokenize each probe's prompt alike. That needs the servers, so it
is done here, while each engine's base arm is up: every probe's rendered
prompt through the server's own tokenize endpoint, as its adapter asks it
(`EngineAdapter.tokenize`: vLLM's ``POST /tokenize`` with the messages and
tools, the chat template applied by the server, or the completion prompt;
another engine may render and tokenize in two requests of its own), stored in
the base arm's launch facts under `observatory.judge.cross_engine.PROMPT_IDS`.
The judge reads them from the store and needs no server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from observatory.client.send import EngineClient
from observatory.engines.adapter import adapter_for
from observatory.model.probes import Probe

TOKENIZE_TIMEOUT_S = 30.0  # each tokenize call, as a whole


def engines_of(arms: Sequence[Any]) -> list[str]:
    """The engines of planned arms (`observatory.model.arms.Arm`), in run order of their first arm."""
    return list(dict.fromkeys(a.engine for a in arms))


def _post(http: EngineClient, path: str, body: dict[str, Any]) -> Any:
    r = http.fetch(path, TOKENIZE_TIMEOUT_S, body)  # bounded as a whole (`EngineClient.fetch`)
    if r.status_code != 200:
        raise ValueError(f"POST {path.lstrip('/')} answered {r.status_code}: {r.text[:200]}")
    return r.json()


def _tokenize_one(http: EngineClient, engine: str, model: str, probe: Probe) -> dict[str, Any]:
    """{"ids", "pieces"} of PROBE's rendered prompt as HTTP's server tokenizes it (its engine's way)."""
    return adapter_for(engine).tokenize(lambda path, body: _post(http, path, body), "", model, probe)


def prompt_ids(base_url: str, engine: str, model: str, probes: Sequence[Probe],
               api_key: str | None = None) -> dict[str, dict[str, Any]]:
    """Probe name -> {"ids", "pieces"} of its rendered prompt through the server's tokenize endpoint.

    A probe the server cannot tokenize gets {"error": ...} (its comparison is
    then "not measured"), never a guess.
    """
    out: dict[str, dict[str, Any]] = {}
    http = EngineClient(base_url, api_key=api_key, timeout=TOKENIZE_TIMEOUT_S, engine=engine)
    try:
        for p in probes:
            try:
                out[p.name] = _tokenize_one(http, engine, model, p)
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
                out[p.name] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        http.close()
    return out
