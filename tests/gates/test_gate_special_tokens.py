"""special_tokens gate (issue 15 item 10): special tokens in spec output that base's does not have."""

from __future__ import annotations

from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe

PROBE = Probe(name="p", category="prose_en", prompt="x")


def _check(spec: str, base: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    res = default_registry().get("special_tokens").check(Output(text=spec), Output(text=base), PROBE)
    return res.verdict, res.details


def test_leaked_role_marker_fails() -> None:
    """Negative control: a role marker injected into the spec output trips the gate."""
    verdict, details = _check("Paris is the capital.<|im_start|>assistant\nParis", "Paris is the capital.")
    assert verdict == "FAIL" and details["leaked"] == {"<|im_start|>": 1}


def test_other_tokenizers_markers_fail() -> None:
    for marker in ("</s>", "[INST]", "<end_of_turn>", "<｜end▁of▁sentence｜>", "<|eot_id|>"):
        assert _check(f"text {marker} more", "text more")[0] == "FAIL", marker


def test_marker_base_prints_too_is_not_a_leak() -> None:
    assert _check("use <|im_end|> to end a turn", "use <|im_end|> to end a turn")[0] == "PASS"
    assert _check("a <|im_end|> b <|im_end|>", "a <|im_end|> b")[0] == "FAIL"  # one more than base


def test_ordinary_text_and_tool_tags_pass() -> None:
    assert _check("a < b | c > d, <tool_call>{}</tool_call>, <think>x</think>", "")[0] == "PASS"
