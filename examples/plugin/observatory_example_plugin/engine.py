"""An engine adapter: a vLLM build under another name (a fork, a vendor image) that reports as vLLM does."""

from __future__ import annotations

from observatory.engines.vllm import VLLMAdapter


class ExampleVLLMAdapter(VLLMAdapter):
    """vLLM's counters and version, under the engine name ``example-vllm``."""

    name = "example-vllm"
