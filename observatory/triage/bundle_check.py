#!/usr/bin/env python3
"""Re-check a reproduction bundle against a running OpenAI-compatible server (stdlib only).

Written into every `observatory triage --bundle DIR` as ``check.py``; it
reads ``sequence.json``, ``requests/`` and ``expected/`` next to itself,
sends the requests in the recorded order (a step with several requests sends
them at once, as the failing batch did), and compares each checked
response's generated token ids with the base (non-speculative) output.

    python check.py --url http://127.0.0.1:8000

Exit status: 1 when the bug reproduces (an output differs from base's), 0
when every output equals base's, 2 when the server cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _ids(logprobs: Any) -> list[int]:
    if not isinstance(logprobs, dict):
        return []
    tokens = logprobs.get("tokens")  # completions
    if tokens is None:
        tokens = [c.get("token") for c in logprobs.get("content") or []]  # chat
    return [int(str(t).split(":", 1)[1]) for t in tokens if str(t).startswith("token_id:")]


def _text(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return str(choice.get("text") or "")
    msg = choice.get("delta") or choice.get("message") or {}
    return str(msg.get("content") or "")


def send(url: str, body: dict[str, Any]) -> tuple[list[int], str]:
    """POST one request; return (generated token ids, text)."""
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    ids: list[int] = []
    text = ""
    with urllib.request.urlopen(req, timeout=600) as resp:
        if not body.get("stream"):
            choice = json.loads(resp.read())["choices"][0]
            return _ids(choice.get("logprobs")), _text(choice)
        for raw in resp:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices") or []:
                ids += _ids(choice.get("logprobs"))
                text += _text(choice)
    return ids, text


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """0-based index of the first differing token; None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv: list[str] | None = None) -> int:
    """Send the bundle's requests to --url; report each checked output against base's."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default %(default)s)")
    args = ap.parse_args(argv)
    url = args.url.rstrip("/")
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as resp:
            model = json.loads(resp.read())["data"][0]["id"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as e:
        print(f"cannot use {url}: {e}; start the server with launch.sh first", file=sys.stderr)
        return 2
    reproduced = False
    for step in json.loads((HERE / "sequence.json").read_text()):
        bodies = [{**json.loads((HERE / "requests" / f).read_text()), "model": model} for f in step["send"]]
        try:
            with ThreadPoolExecutor(max_workers=len(bodies)) as ex:
                outs = list(ex.map(lambda b: send(url, b), bodies))
        except (urllib.error.URLError, OSError, ValueError) as e:
            print(f"request failed: {e}", file=sys.stderr)
            return 2
        for name, (ids, text) in zip(step["send"], outs):
            if name not in step.get("check", []):
                continue
            exp = json.loads((HERE / "expected" / name).read_text())
            pos = first_divergence(ids, exp["base"]["token_ids"])
            if pos is None:
                print(f"{name}: equal to base ({len(ids)} tokens)")
                continue
            reproduced = True
            print(f"{name}: REPRODUCED: differs from base at token {pos} "
                  f"(base {exp['base']['token_ids'][pos:pos + 5]} vs got {ids[pos:pos + 5]}); text {text[:80]!r}")
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())
