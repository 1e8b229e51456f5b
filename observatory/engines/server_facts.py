"""What a running arm is, as far as its host and its server say: facts for the confound checks.

An arm at a URL has no launch command to compare, so the facts its server
exposes are compared instead: the served model, its root and max model
length (``/v1/models``), the engine version (``/version``, stored on the arm
row) and the KV-cache settings vLLM publishes as ``vllm:cache_config_info``
(``/metrics``: block size, cache dtype, prefix caching, memory utilization),
and the lossy-by-configuration flags SGLang reports in ``/get_server_info``
(``server_args``, read by `observatory.engines.lossy_knobs`).
Every arm also records the host and GPU models it ran on, so an arm resumed
on another machine is told apart (CROSS_SESSION). A fact the server does not
expose is absent, and the comparison lists it as unchecked, never as equal.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx

from observatory.engines.lossy_knobs import REPORTED_ARGS
from observatory.engines.machine import describe
from observatory.engines.metrics import read_info
from observatory.store.session_store import TRUNCATED

# (fact, where it lives: "launch" for launch["served"][fact], "row" for the arm row's attribute);
# root is the model path or repo the server loaded, behind the served name
# vllm:cache_config_info labels that are settings (block counts and memory sizes
# follow from them and from the draft model's footprint, so they may differ)
CACHE_SETTINGS = frozenset({"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                            "swap_space", "prefix_caching_hash_algo", "calculate_kv_scales", "sliding_window",
                            "cpu_offload_gb", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "kv_sharing_fast_prefill"})
SERVED_FACTS = (("model", "row"), ("engine_version", "row"), ("max_model_len", "launch"), ("root", "launch"))


def reported_block_size(served: dict[str, Any] | None) -> int | None:
    """The KV-cache block size a server reported (``cache_config.block_size`` of its served facts), or None."""
    raw = ((served or {}).get("cache_config") or {}).get("block_size")
    try:
        n = int(str(raw))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def host_facts() -> dict[str, Any]:
    """The host name and the GPU models of the machine an arm runs on."""
    try:
        gpus = describe().get("gpus") or []
    except OSError:
        gpus = []
    return {"host": socket.gethostname(), "gpu_models": list(gpus)}


# The most characters of one server fact (a version, a model root) stored or shown: a server may
# answer megabytes (issue 32 item 3: a 400 KB /version stalled the report); real versions are < 64.
MAX_FACT_CHARS = 256


def fact_text(value: Any, limit: int = MAX_FACT_CHARS) -> str | None:
    """VALUE as a stored server fact: a string of at most LIMIT characters (None stays None)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def served_facts(client: Any, timeout: float = 10.0) -> dict[str, Any]:
    """{"max_model_len": ..., "served_model": ..., "root": ...} from the server's /v1/models; {} if unreadable.

    Read through CLIENT's bounded GET (`EngineClient.fetch`): a server that
    drips its /v1/models or /metrics cannot hold the arm past the timeout.
    """
    try:
        r = client.fetch("/v1/models", timeout)
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return {}
    m = data[0]
    out: dict[str, Any] = {"served_model": fact_text(m.get("id"), 4096), "root": fact_text(m.get("root"), 4096)}
    if type(m.get("max_model_len")) is int and 0 < m["max_model_len"] <= 2**31 - 1:
        out["max_model_len"] = m["max_model_len"]
    try:
        r = client.fetch("/metrics", timeout)
        cache = cache_config(r.text) if r.status_code == 200 else None
    except httpx.HTTPError:
        cache = None
    if cache is not None:
        out["cache_config"] = cache
    args = _server_args(client, timeout)
    if args:
        out["server_args"] = args
    return out


def _server_args(client: Any, timeout: float) -> dict[str, Any]:
    """The settings SGLang's ``/get_server_info`` reports that `lossy_knobs` reads; {} elsewhere (vLLM: 404)."""
    try:
        r = client.fetch("/get_server_info", timeout)
        info = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}
    if not isinstance(info, dict):
        return {}
    out: dict[str, Any] = {}
    for key in REPORTED_ARGS:
        v = info.get(key)
        if key not in info:
            continue
        if isinstance(v, bool | int | float) or v is None:
            out[key] = v
        elif isinstance(v, str):
            out[key] = fact_text(v)
    return out


def cache_config(metrics_text: str) -> dict[str, str] | None:
    """The settings of vLLM's ``vllm:cache_config_info`` gauge that must match across arms; None if absent."""
    labels = read_info(metrics_text, "vllm:cache_config_info")
    return None if labels is None else {k: v for k, v in sorted(labels.items()) if k in CACHE_SETTINGS}


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
    cache = cache_differences(arm, base)
    if cache is None:
        unchecked.append("cache config (vllm:cache_config_info)")
    else:
        diffs += cache
    return diffs, unchecked


def cache_differences(arm: Any, base: Any) -> list[str] | None:
    """The KV-cache settings two servers report differently (prefix caching as served, block size, ...).

    None when either server did not report them: not compared, never "equal".
    """
    ca, cb = _fact(arm, "cache_config", "launch"), _fact(base, "cache_config", "launch")
    if ca is None or cb is None:
        return None
    return [f"cache {k}: {cb[k]!r} on base, {ca[k]!r} here" for k in sorted(set(ca) & set(cb)) if ca[k] != cb[k]]
