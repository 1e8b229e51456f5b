"""Every OBSERVATORY_* environment variable the code and its scripts read, for `observatory --help` (its epilog).

An engine's own (what its arms read) are its adapter's ``env_vars`` (`observatory.engines.arm_engines.env_vars`), given
to `epilog`. tests/commands/test_cli_help.py greps the package and scripts/ for ``OBSERVATORY_`` names and checks each is
listed here or there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ENV_VARS = {
    "OBSERVATORY_DB": "database when --db is not given (SQLite file or SQLAlchemy URL; default runs.db)",
    "OBSERVATORY_API_KEY": "bearer key for URL arms, as --api-key (never stored)",
    "OBSERVATORY_ENGINE_PYTHON": "interpreter that has vLLM, as --engine-python (default: this one)",
    "OBSERVATORY_DEFAULT_MODEL": "folder of the embedded default model (default: the packaged tiny MTP model)",
    "OBSERVATORY_GPU_COUNT": "GPUs this host has, overriding detection (plans --parallel-arms waves)",
    "OBSERVATORY_FAULT": "set in an engine's environment (by selftest's +fault=F arms): the faults it injects",
    "OBSERVATORY_NEAR_TIE_FLIP_FRACTION": "set in an engine's environment: the share of near-tie rows the near_tie_flip fault swaps on the verify path (default 0.5)",
    "OBSERVATORY_SLOW_STEP_FRACTION": "set in an engine's environment: how much slower the slow_step fault makes each spec step (default 0.05)",
    "OBSERVATORY_DRAFT_NOISE_FRACTION": "set in an engine's environment: the share of draft rows the draft_noise fault replaces (default 1)",
    "OBSERVATORY_MIXED_TYPO_RATE": "set in an engine's environment: the share of mixed-batch requests the mixed_typo fault corrupts (default 0.005)",
    "OBSERVATORY_LONG_NOISE_FROM": "set in an engine's environment: the prompt length past which the long_noise fault noises every draft (default 512)",
    "OBSERVATORY_DEPTH_ONLY_K": "set in an engine's environment: the one speculation depth the depth_only fault corrupts (default 3)",
    "OBSERVATORY_REPAIR": "set in an engine's environment (an arms file's env): the engine repair it applies",
    "OBSERVATORY_SQLITE_BUSY_MS": "how long SQLite waits for another writer's lock, in ms (default 30000)",
    "OBSERVATORY_RAISE_ERRORS": "any value: an internal error shows its traceback instead of one line",
    "OBSERVATORY_IMAGE_TAG": "the tag scripts/build-image.sh builds (default observatory/vllm-cpu:local)",
    "OBSERVATORY_COMPILE_CACHE": "where containerised vLLM arms keep their compile cache (default: ~/.cache/observatory/compile; off: none)",
    "OBSERVATORY_IMAGE_CACHE": "scripts/build-image.sh's wheel cache (default: ~/.cache/observatory/image)",
    "COLUMNS": "width of terminal output (default: the terminal's; 240 where the output is not a terminal, a CI log)",
}


# the engines' own variables are listed after this one (they configure launches, as it does)
_ENGINES_AFTER = "OBSERVATORY_GPU_COUNT"


def listed(engine_vars: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable --help lists: ENV_VARS with the engines' own (ENGINE_VARS) among them."""
    items = list(ENV_VARS.items())
    at = list(ENV_VARS).index(_ENGINES_AFTER) + 1
    return dict(items[:at] + list((engine_vars or {}).items()) + items[at:])


def epilog(engine_vars: Mapping[str, str] | None = None) -> str:
    """The --help epilog: one line per variable (click keeps the lines of a \\b paragraph)."""
    shown = listed(engine_vars)
    width = max(map(len, shown))
    return "\b\nEnvironment variables:\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in shown.items())


# Each fault's own knobs: "the NAME fault" in the description (judge/figures.launch_differences: on an arm that
# declares that fault, its knob is part of the fault, not a difference from base)
FAULT_KNOBS: dict[str, str] = {
    name: m.group(1) for name, what in ENV_VARS.items()
    if name != "OBSERVATORY_FAULT" and (m := re.search(r"the (\w+) fault\b", what))
}
