"""What a running arm is, as far as its host and its server say: facts for the confound checks.

An arm at a URL has no launch command to compare, so the facts its server
exposes are compared instead: the served model and its max model length
(``/v1/models``) and the engine version (``/version``, stored on the arm row).
Every arm also records the host and GPU models it ran on, so an arm resumed
on another machine is told apart (CROSS_SESSION). A fact the server does not
expose is absent, and the comparison lists it as unchecked, never as equal.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx

from observatory.machine import describe

# (fact, where it lives: "launch" for launch["served"][fact], "row" for the arm row's attribute);
# root is the model path or repo the server loaded, behind the served name
SERVED_FACTS = (("model", "row"), ("engine_version", "row"), ("max_model_len", "launch"), ("root", "launch"))


def host_facts() -> dict[str, Any]:
    """The host name and the GPU models of the machine an arm runs on."""
    try:
        gpus = describe().get("gpus") or []
    except OSError:
        gpus = []
    return {"host": socket.gethostname(), "gpu_models": list(gpus)}


def served_facts(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """{"max_model_len": ..., "served_model": ..., "root": ...} from the server's /v1/models; {} if unreadable."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{base_url.rstrip('/')}/v1/models", headers=headers, timeout=timeout)
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return {}
    m = data[0]
    out: dict[str, Any] = {"served_model": m.get("id"), "root": m.get("root")}
    if isinstance(m.get("max_model_len"), int):
        out["max_model_len"] = m["max_model_len"]
    return out


def _fact(arm: Any, name: str, where: str) -> Any:
    if where == "row":
        return getattr(arm, name, None)
    return ((arm.launch or {}).get("served") or {}).get(name)


def served_differences(arm: Any, base: Any) -> tuple[list[str], list[str]]:
    """(differences, facts that could not be compared) between two arms' servers."""
    diffs, unchecked = [], []
    for name, where in SERVED_FACTS:
        a, b = _fact(arm, name, where), _fact(base, name, where)
        if a is None or b is None:
            unchecked.append(name)
        elif a != b:
            diffs.append(f"{name}: {b!r} on base, {a!r} here")
    return diffs, unchecked
