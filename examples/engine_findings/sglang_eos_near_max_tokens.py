"""Reproduction: SGLang 0.5.14's EAGLE (MTP) arm does not stop at the end token when it falls in the last
verify step before ``max_tokens``: it emits the end token again until ``max_tokens`` and says "length".

    python examples/engine_findings/sglang_eos_near_max_tokens.py [--url URL] [--base-url URL]

Without --url, launches ``sglang:mtp2`` (and ``sglang:base`` without --base-url) on the bundled tiny
model through the observatory's own launcher, as a session does (on the H200: after
``bash examples/gpu/run_engines_h200.sh stage``, with that script's environment: device_env.sh,
SGLANG_BUNDLE_FP32_NATIVE=1, OBSERVATORY_SGLANG_ARGS, and PYTHONPATH=/tmp/sgl-site for the engine).

One greedy whole chat request, the default suite's recite-river-7 ("Say \"river\" 7 times."), with
``return_meta_info`` (where 0.5.14 puts a chat's ids), at every ``max_tokens`` from 13 to 24. Base
answers 14 ids ending in the end token (id 2) with finish_reason "stop" at every cap of 14 and above.

Seen on the H200 three-engine night (2026-12-04, examples/h200-engines/README.md): the soak channel's
request at ``max_tokens`` 16 came back from ``sglang:sgl-mtp2`` as
``[1160, 223, ..., 1160, 2, 2, 2]``, finish_reason "length", ``usage.completion_tokens`` 16, twice
(both occurrences), while ``sglang:sgl-base`` answered ``[..., 1160, 2]``, "stop", 14; the same request
at ``max_tokens`` 24 (the stream and nonstream passes) stopped at the end token on both arms. The text
is the same (the end token is not shown), so only ids, finish_reason and usage tell. Not yet run as
this script: it is written from those stored answers for the next device session. Exit status 1 when a
cap gives the spec arm an answer other than base's, 0 when all agree.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

MESSAGES = [{"role": "user", "content": 'Say "river" 7 times.'}]
CAPS = range(13, 25)


def ask(url: str, max_tokens: int) -> dict[str, Any]:
    """One greedy whole chat completion; its ids (from meta_info), finish_reason and usage."""
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    body = {"model": model, "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0,
            "logprobs": True, "top_logprobs": 1, "return_meta_info": True}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    meta = choice.get("meta_info") or {}
    ids = [int(t[1]) for t in meta.get("output_token_logprobs") or []]
    return {"ids": ids, "finish": choice.get("finish_reason"),
            "usage": (r.json().get("usage") or {}).get("completion_tokens")}


@contextlib.contextmanager
def served(name: str, log_dir: Path) -> Any:
    """URL of arm NAME (e.g. sglang:mtp2) launched on the bundled model by the observatory's launcher."""
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import parse_arms
    from observatory.model.paths import DEFAULT_MODEL_DIR
    from observatory.session.launch import launch

    (arm,) = parse_arms(name)
    settings = EngineSettings(model=str(DEFAULT_MODEL_DIR), max_model_len=1024, health_timeout_s=400)
    with launch(arm, settings, None, log_dir / f"{name.replace(':', '_')}.log") as engine:
        yield engine.url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running SGLang server with EAGLE/MTP speculation (default: launch sglang:mtp2)")
    ap.add_argument("--base-url", help="a running SGLang server without speculation (default: launch sglang:base)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        base = args.base_url or stack.enter_context(served("sglang:base", Path(tmp)))
        ref = {cap: ask(base, cap) for cap in CAPS}
        if not args.base_url:
            stack.close()  # one engine on the GPU at a time, as a session runs them
        with contextlib.ExitStack() as spec_stack:
            spec = args.url or spec_stack.enter_context(served("sglang:mtp2", Path(tmp)))
            got = {cap: ask(spec, cap) for cap in CAPS}
    differ = 0
    print(f"{'max_tokens':>10}  {'base (finish, usage, ids tail)':<40}  spec")
    for cap in CAPS:
        b, s = ref[cap], got[cap]
        same = b == s
        differ += not same
        print(f"{cap:>10}  {b['finish']!s:>6} {b['usage']!s:>3} {b['ids'][-4:]!s:<28}  "
              f"{s['finish']!s:>6} {s['usage']!s:>3} {s['ids'][-4:]!s}{'' if same else '   <- differs'}")
    print(f"{differ} of {len(CAPS)} caps differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
