"""What CUDA graphs a vLLM arm captured, read from its engine log or its launch argv (issue 29 item 4).

vLLM prints its whole engine config once at start ("Initializing a V1 LLM
engine ... compilation_config={...}"): ``cudagraph_mode``,
``cudagraph_capture_sizes`` (the step sizes, in tokens, a graph was captured
for) and ``max_cudagraph_capture_size``; ``--enforce-eager`` prints
"Cudagraph is disabled under eager mode". `from_log` reads those; `from_argv`
what the command line alone says (``--enforce-eager``, ``--cuda-graph-sizes``,
``cudagraph_capture_sizes`` in ``--compilation-config`` / ``-O``), for
sessions stored before the log was read. Which graph a step then uses is the
judge's (observatory/judge/graph_coverage.py).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

LOG_HEAD_BYTES = 4_000_000  # the config line comes within the first seconds of the log
_SIZES = re.compile(r"'cudagraph_capture_sizes': (\[[0-9, ]*\])")
_MAX = re.compile(r"'max_cudagraph_capture_size': (\d+|None)")
_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.([A-Z_]+)")
_EAGER = re.compile(r"Cudagraph is disabled under eager mode|enforce_eager=True")
_SEQS = re.compile(r"'max_num_seqs': (\d+)")


def from_log(text: str) -> dict[str, Any] | None:
    """The capture facts of one vLLM engine log's TEXT; None when the log has no config line (not vLLM, cut short)."""
    sizes, mode = _SIZES.search(text), _MODE.search(text)
    if sizes is None and mode is None and not _EAGER.search(text):
        return None
    listed = [int(s) for s in ast.literal_eval(sizes.group(1))] if sizes else None
    mx = _MAX.search(text)
    seqs = _SEQS.search(text)
    eager = bool(_EAGER.search(text)) or (mode is not None and mode.group(1) == "NONE") or listed == []
    return {"source": "engine log", "eager": eager, "mode": mode.group(1) if mode else None,
            "sizes": sorted(listed) if listed else [],
            "max_size": int(mx.group(1)) if mx and mx.group(1) != "None" else (max(listed) if listed else None),
            "max_num_seqs": int(seqs.group(1)) if seqs else None}


def from_log_file(path: str | Path | None) -> dict[str, Any] | None:
    """`from_log` of the head of the log at PATH; None when there is none to read."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            text = f.read(LOG_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    return from_log(text)


def _flags(argv: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    for i, tok in enumerate(argv):
        if not tok.startswith("-"):
            continue
        key, eq, val = tok.partition("=")
        if eq:
            out[key] = val
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[key] = argv[i + 1]
        else:
            out[key] = True
    return out


def from_argv(argv: list[str]) -> dict[str, Any] | None:
    """What ARGV alone says about capture (eager, or sizes it lists); None when it leaves them to vLLM's defaults."""
    flags = _flags(argv)
    seqs = flags.get("--max-num-seqs")
    base: dict[str, Any] = {"source": "launch argv", "mode": None,
                            "max_num_seqs": int(seqs) if isinstance(seqs, str) and seqs.isdigit() else None}
    if flags.get("--enforce-eager") is True:
        return {**base, "eager": True, "sizes": [], "max_size": None}
    sizes: list[int] | None = None
    cc: dict[str, Any] = {}
    if isinstance(flags.get("--cuda-graph-sizes"), str):
        sizes = [int(s) for s in str(flags["--cuda-graph-sizes"]).replace(",", " ").split() if s.isdigit()]
    for key in ("--compilation-config", "-O"):
        raw = flags.get(key)
        if isinstance(raw, str):
            try:
                got = json.loads(raw)
            except ValueError:
                continue
            if isinstance(got, dict):
                cc = got
    if isinstance(cc.get("cudagraph_capture_sizes"), list):
        sizes = [int(s) for s in cc["cudagraph_capture_sizes"] if isinstance(s, int)]
    mode = cc.get("cudagraph_mode")
    if isinstance(mode, str) and mode.upper() == "NONE":
        return {**base, "mode": "NONE", "eager": True, "sizes": [], "max_size": None}
    if sizes is None:
        return None
    mx = cc.get("max_cudagraph_capture_size")
    return {**base, "mode": mode if isinstance(mode, str) else None, "eager": not sizes, "sizes": sorted(sizes),
            "max_size": int(mx) if isinstance(mx, int) else (max(sizes) if sizes else None)}
