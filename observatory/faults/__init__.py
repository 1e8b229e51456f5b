"""Speculative-decoding fault injection: a vLLM general plugin (the negative control).

The observatory's gates claim to catch broken speculative decoding. This plugin
proves they fire on the *real* engine: it breaks spec decoding on purpose, in
the ways the field saw it break, when and only when ``OBSERVATORY_FAULT`` names
a fault. It is registered in ``pyproject.toml``::

    [project.entry-points."vllm.general_plugins"]
    observatory_faults = "observatory.faults:register"

vLLM calls `register` in every process that loads general plugins
(``vllm.plugins.load_general_plugins``): the API server (at CLI parsing and in
``EngineArgs``), the engine core (``EngineCore.__init__``) and every worker
(``WorkerWrapperBase.init_worker``). Importing this module is cheap (no vLLM,
no torch); with the variable unset or empty `register` returns at once.

Faults (``OBSERVATORY_FAULT=name`` or a comma-separated list, e.g.
``accept_all,drop_bonus``):

``accept_all``
    Draft tokens are accepted without verification: a speculative step emits
    the draft head's proposals plus the bonus token sampled after them.
    Injected in the rejection sampler, so the engine is fully consistent with
    the (wrong) tokens: it is as if the target had agreed with every draft.
``ghost``
    The last token emitted for a request in one step is emitted again at the
    start of its next speculative step (a duplicated "ghost" token in the
    stream). Injected where the scheduler hands a step's tokens to the client.
``drop_bonus``
    The bonus token of a fully accepted step is dropped from the stream. Also
    injected at the scheduler -> client boundary: the engine keeps the token
    and generates on from it, so the client's text silently loses it.

Why ``ghost`` and ``drop_bonus`` are not rejection-sampler faults (see
`observatory.faults.patches` for the hook points per vLLM version): the
sampler's output is at once the stream *and* the engine's state (it becomes
the next step's input, the drafter's input and the scheduler's
accepted/rejected count). Dropping the bonus there is a lossless fault: the
scheduler counts it as one more rejected draft and the next step regenerates
the very same token, so greedy output does not change at all (only the
acceptance rate drops). A ghost there needs the previous step's token, which
the sampler never sees, and an extra token per row breaks the
``len(generated) - 1 == accepted`` bookkeeping. At the scheduler -> client
boundary both faults change exactly what the client sees, the engine stays
untouched and consistent, and the signature is exact: ``ghost`` output with
the duplicates removed, and ``drop_bonus`` output with the lost tokens put
back, equal the clean output.

Every fault changes only speculative steps (a request step that verified at
least one draft token): a base arm without speculation is untouched even with
the variable set.

An unknown fault name raises `FaultConfigError` from `register`. vLLM does not
catch exceptions from a general plugin's function (only from loading it), and
the API server calls `register` while parsing its command line, so a typo
stops the server before it loads a model, with this message. Logging and
running clean instead would make the negative control silently pass: the
observatory would report "gates did not fire" for a fault that was never
injected, which is exactly the false negative a negative control exists to
rule out.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from observatory.faults.field_answers import FAULTS as _ANSWERS
from observatory.faults.field_boundaries import FAULTS as _BOUNDARIES
from observatory.faults.field_conditions import FAULTS as _CONDITIONS
from observatory.faults.field_edges import FAULTS as _EDGES
from observatory.faults.field_numerics import FAULTS as _NUMERICS
from observatory.faults.field_params import FAULTS as _PARAMS
from observatory.faults.field_reasoning import FAULTS as _REASONING
from observatory.faults.field_sdk import FAULTS as _SDK
from observatory.faults.field_seeds import FAULTS as _SEEDS
from observatory.faults.field_semantics import FAULTS as _SEMANTICS
from observatory.faults.field_speed import FAULTS as _SPEED
from observatory.faults.field_volume import FAULTS as _VOLUME
from observatory.faults.names import split_names

__all__ = [
    "ENV_VAR",
    "FAULTS",
    "FaultConfigError",
    "active_faults",
    "parse_faults",
    "register",
]

ENV_VAR = "OBSERVATORY_FAULT"

# name -> one-line description (the registry; patches.py maps names to hooks).
FAULTS: dict[str, str] = {
    "accept_all": "draft tokens accepted without verification (drafts + bonus emitted)",
    "ghost": "last token of a step emitted again at the start of the next spec step",
    "drop_bonus": "bonus token of a fully accepted spec step dropped from the stream",
    # knob-conditional (observatory.faults.knob_conditions): ghost under one engine setting only
    "ghost_k2": "ghost, only when num_speculative_tokens >= 2",
    "ghost_prefix": "ghost, only when prefix caching is on",
    "ghost_batch": "ghost, only in a step that schedules more than one request",
    # state, length and batch (observatory.faults.field_state): the soak, length_sweep, mixed_batch channels
    "soak_poison": "spec steps ghosted from the 6th time the engine serves the same prompt",
    "length_poison": "spec steps ghosted when prompt length % block_size == (1 + k) % block_size",
    "batch_swap": "first new token swapped between two spec rows of a batch holding a request with stop strings",
    **_SEMANTICS,  # issue 15: past_stop, stream_drop, draft_noise, inflate_accepted (field_semantics)
    **_ANSWERS,  # issue 28 item 2: usage_overcount, logprob_shift (field_answers)
    # field channels (observatory.faults.field_*): each caught by one channel
    "biased_accept": "temperature > 0: drafts accepted with probability min(1, 2p/q) (greedy untouched)",
    **_SEEDS,  # issue 28 items 3-4: seed_ignored (channel seeds), logprob_row (channel teacher)
    **_SDK,  # issue 28 item 7: sdk_object (field_sdk), caught by channel sdk
    **_PARAMS,  # issue 28 item 1: spec_penalty_skip, spec_bad_words_skip (field_params: channel params)
    **_CONDITIONS,  # issue 28 item 5: preempt_poison, wake_broken_drafter, length_decay (field_conditions)
    **_SPEED,  # issue 29 item 5: slow_step (field_speed), caught by channel history
    **_VOLUME,  # issues 48-49: mixed_typo, tools_bad_drafts (channel volume), sampled_no_drafts (speculates)
    **_NUMERICS,  # issue 46 item 2: near_tie_flip (field_numerics), caught by the near-tie rate
    **_BOUNDARIES,  # issue 49 item 12: limit_neighbour, abort_stale, stream_top_copy, stream_args_drop, min_tokens_short
    **_EDGES,  # issue 49: spec_cache_miss (prefix_cache), depth_only (a deployed-k arm), embeds_drafts (prompt_embeds)
    **_REASONING,  # issue 49 item 8: think_leak (field_reasoning), caught by channel reasoning
}

# A child of vLLM's logger, so messages use vLLM's handler and format in every
# process (vLLM configures the "vllm" logger and stops propagation there).
logger = logging.getLogger("vllm.plugins.observatory_faults")


class FaultConfigError(ValueError):
    """``OBSERVATORY_FAULT`` names a fault that does not exist."""


def parse_faults(value: str | None) -> frozenset[str]:
    """Parse the variable's value into a set of fault names.

    ``None``, empty, or one of ``none/off/0/false/no`` (any case) mean no
    fault. Otherwise a comma- or whitespace-separated list of names from
    `FAULTS`, case-insensitive; ``-`` is accepted for ``_``. Raises
    `FaultConfigError` on any unknown name.
    """
    names = split_names(value)
    unknown = sorted(names - FAULTS.keys())
    if unknown:
        raise FaultConfigError(
            f"{ENV_VAR}={value!r}: unknown fault(s) {', '.join(unknown)}; "
            f"known faults: {', '.join(sorted(FAULTS))} "
            f"(comma-separated to combine; unset or 'none' for no fault)"
        )
    return names


def active_faults(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The faults named by the environment (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    return parse_faults(env.get(ENV_VAR))


def register() -> None:
    """vLLM general-plugin entry point. Inert unless ``OBSERVATORY_FAULT`` or ``OBSERVATORY_REPAIR`` is set.

    Safe to call several times in one process (vLLM may; a forked child
    inherits patched modules): patches are applied once per module.
    """
    from observatory.faults import repairs  # no vLLM, no torch at import

    fixes = repairs.active_repairs()
    if fixes:
        repairs.install(fixes)
    faults = active_faults()
    if not faults:
        return
    from observatory.faults import patches  # only when armed: keeps import cheap

    patches.install(faults)
    logger.warning(
        "%s=%s: observatory fault injection ARMED in pid %d; speculative "
        "decoding outputs will be corrupted on purpose (%s)",
        ENV_VAR,
        ",".join(sorted(faults)),
        os.getpid(),
        "; ".join(f"{n}: {FAULTS[n]}" for n in sorted(faults)),
    )
