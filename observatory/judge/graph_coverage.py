"""CUDA graph coverage: did the arm's timed steps run in a captured graph, or on the eager path? (issue 29 item 4)

A deployment serves from CUDA graphs; a timed step of a size no graph covers
runs eagerly, and its speed is the eager path's, not the deployment's: on base
that inflates every speedup against it, on a spec arm it deflates S. Which
graph vLLM replays for a step, from vllm/v1/cudagraph_dispatcher.py
(`CudagraphDispatcher`, as read in the vLLM 0.32 CPU build's copy; the H200
examples ran 0.26, not checked line by line):

- the step's size is its token count. Without speculation a decode step of
  ``n`` sequences is ``n`` tokens; with ``num_speculative_tokens = k`` the
  verifier's step is a *uniform decode* batch of ``n * (k + 1)`` tokens
  (``uniform_decode_query_len = 1 + num_speculative_tokens``; the FULL
  decode graphs are the capture sizes from ``k + 1`` to
  ``(k + 1) * max_num_seqs``);
- ``dispatch`` returns no graph (eager) when the token count exceeds
  ``max_cudagraph_capture_size``; below it the count is padded up to the next
  size in ``cudagraph_capture_sizes`` (``_compute_bs_to_padded_graph_size``,
  ``_create_padded_batch_descriptor``);
- ``--enforce-eager`` (``cudagraph_mode`` NONE) captures nothing.

So an arm timed at concurrency ``c`` runs decode steps of up to
``min(c, max_num_seqs) * (k + 1)`` tokens (k = 0 on base); a level whose
step exceeds the largest captured size ran eagerly and is flagged; a level
whose step has no exact size ran padded (in a graph: noted, not flagged).
The CPU engine has no CUDA graphs ("not applicable"); a URL arm's and a
non-vLLM engine's capture cannot be read here ("unknown").
"""

from __future__ import annotations

from typing import Any

from observatory.engines.adapter import adapter_for
from observatory.engines.cuda_graphs import from_argv
from observatory.store.db import ArmRow

COVERED, OUTSIDE, EAGER, NOT_APPLICABLE, UNKNOWN = "covered", "outside", "eager", "not applicable", "unknown"


def _k(launch: dict[str, Any]) -> int:
    spec = launch.get("speculative_config")
    k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0


def coverage(arm: ArmRow, levels: list[int]) -> dict[str, Any]:
    """The arm's captured sizes against the decode steps of its timed concurrency LEVELS.

    ``status``: covered, outside (a level's step above every captured size), eager (nothing captured),
    not applicable (CPU engine) or unknown (with ``why``); ``flagged``: its speed is the eager path's.
    """
    launch = dict(arm.launch or {})
    out: dict[str, Any] = {"status": UNKNOWN, "flagged": False, "levels": [], "why": None, "graphs": None}
    if launch.get("url"):
        return {**out, "why": "URL arm: its server's engine log and launch flags are not here"}
    if not getattr(adapter_for(arm.engine), "logs_cuda_graphs", False):
        return {**out, "why": f"capture sizes are not read for {arm.engine}"}
    if not launch.get("gpus"):
        return {**out, "status": NOT_APPLICABLE, "why": "CPU engine: no CUDA graphs"}
    graphs = launch.get("cuda_graphs") or from_argv(list(launch.get("argv") or []))
    if not graphs:
        return {**out, "why": "capture sizes not recorded (no engine log config line stored, and the launch "
                "flags leave them to vLLM's defaults)"}
    out["graphs"] = graphs
    if graphs.get("eager"):
        return {**out, "status": EAGER, "flagged": True,
                "why": f"no CUDA graphs captured ({graphs.get('source')}: eager mode): every timed step ran the "
                       "eager path, not a deployment's graphs"}
    sizes = sorted(int(s) for s in graphs.get("sizes") or [])
    top = graphs.get("max_size") or (sizes[-1] if sizes else None)
    if not sizes or top is None:
        return {**out, "why": "capture sizes not readable"}
    k = _k(launch)
    seqs = graphs.get("max_num_seqs")
    rows, outside = [], []
    for c in sorted(set(levels)):
        n = min(c, seqs) if isinstance(seqs, int) and seqs > 0 else c
        step = n * (k + 1)
        padded = next((s for s in sizes if s >= step), None) if step <= top else None
        rows.append({"concurrency": c, "step_tokens": step, "graph_size": padded, "exact": padded == step})
        if padded is None:
            outside.append(f"c={c}: {step} tokens per step > largest captured size {top}")
    out["levels"] = rows
    if outside:
        return {**out, "status": OUTSIDE, "flagged": True,
                "why": "timed steps outside the captured CUDA graphs (" + "; ".join(outside)
                       + "): their speed is the eager path's, not the deployment's"}
    return {**out, "status": COVERED, "why": f"every timed step within the captured sizes {sizes}"
            + ("" if all(r["exact"] for r in rows) else " (some padded up to the next size)")}


def words(cov: dict[str, Any] | None) -> str:
    """One line for the report."""
    if not cov:
        return "CUDA graphs: not judged"
    return f"CUDA graphs: {cov['status']}" + (f" ({cov['why']})" if cov.get("why") else "")
