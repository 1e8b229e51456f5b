"""The volume channel's checks and power (issue 48 item 2): each rule with a negative and a clean control."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from observatory.channels import volume_traffic
from observatory.channels.volume_checks import (
    CORRUPTED,
    NEAR_TIE_FLIP,
    OK,
    UNSCORED,
    code_like,
    greedy_finding,
    near_misses,
    one_edit,
    support_finding,
)
from observatory.judge.power import detectable_rate, seen_probability, statement
from observatory.model.paths import PROBES_DIR
from observatory.model.probes import Probe, load_probe_file


def test_detectable_rate_closed_form_and_examples() -> None:
    """p = 1 - 0.05^(1/n) with nothing tolerated: 2,000 requests see 0.15%, 300 see 1% (docs/design.md 4)."""
    assert detectable_rate(2000) == pytest.approx(1 - 0.05 ** (1 / 2000))
    assert detectable_rate(2000) == pytest.approx(0.001497, abs=1e-6)
    assert detectable_rate(300) == pytest.approx(0.009937, abs=1e-6)
    assert seen_probability(2000, detectable_rate(2000) or 0) == pytest.approx(0.95)
    assert detectable_rate(0) is None and detectable_rate(3, allowed=3) is None


def test_detectable_rate_with_a_tolerance_is_the_exact_binomial() -> None:
    """Tolerating a flagged requests: the smallest p whose P(X > a) reaches 95%, by the exact sum."""
    p = detectable_rate(1000, allowed=2)
    assert p is not None and seen_probability(1000, p, 2) == pytest.approx(0.95, abs=1e-6)
    assert seen_probability(1000, p * 0.99, 2) < 0.95
    assert detectable_rate(1000, allowed=2) > detectable_rate(1000, allowed=0)  # type: ignore[operator]


def test_statement_reads_as_the_issue_asks() -> None:
    """'n requests, k corrupted; a corruption in at least p% of requests would have been seen with 95% probability'."""
    s = statement(2000, 0)
    assert s["text"] == ("2000 requests, 0 corrupted; a corruption in at least 0.15% of requests would have been seen "
                         "with 95% probability")
    assert statement(0, 0)["detectable_rate"] is None


ROW = [[7, -0.1], [8, -2.5]]  # the target prefers 7 by 2.4 nats


def test_greedy_rule_clean_near_tie_and_corrupted() -> None:
    """The target's choice passes; a token within 0.25 nats of it is a near-tie flip; beyond it, corrupted."""
    assert greedy_finding([7], [ROW])["verdict"] == OK
    assert greedy_finding([8], [[[7, -0.6], [8, -0.7]]])["verdict"] == NEAR_TIE_FLIP
    bad = greedy_finding([7, 8], [ROW, ROW])
    assert bad["verdict"] == CORRUPTED and bad["at"] == 1 and bad["expected"] == 7 and bad["margin"] == 2.4
    assert greedy_finding([9], [ROW])["verdict"] == UNSCORED  # a row without the token never excuses it


def test_support_rule_top_p_top_k_and_temperature() -> None:
    """A sampled token inside the nucleus passes; one the top_p mass above it excludes is corrupted."""
    confident = [[1, math.log(0.9)], [2, math.log(0.05)], [3, math.log(0.01)]]
    s = {"temperature": 0.7, "top_p": 0.8}
    assert support_finding([1], [confident], s)["verdict"] == OK
    assert support_finding([3], [confident], s)["verdict"] == CORRUPTED  # 0.95 of raw mass above it
    flat = [[1, math.log(0.3)], [2, math.log(0.29)], [3, math.log(0.2)]]
    assert support_finding([3], [flat], s)["verdict"] == OK  # 0.59 above it: inside a 0.8 nucleus
    assert support_finding([3], [flat], {"temperature": 1.5, "top_p": 0.5})["verdict"] == OK  # T > 1: no bound
    assert support_finding([3], [flat], {"temperature": 1.0, "top_k": 2})["verdict"] == CORRUPTED
    assert support_finding([2], [flat], {"temperature": 1.0, "top_k": 2})["verdict"] == OK  # 2 is a near-tie of 1


def test_identifier_near_misses_need_a_code_like_name_one_edit_away() -> None:
    """SGLang #34959's signature: `charset_normalizer` written `charset_normalixer`; a new word is not one."""
    prompt = "import charset_normalizer\nx = LIRC_SET_REC_TIMEOUT"
    assert near_misses(prompt, "print(charset_normalixer)") == [("charset_normalixer", "charset_normalizer")]
    assert near_misses(prompt, "LIRC_SET_REC_TIMEOUTS = 1") == [("LIRC_SET_REC_TIMEOUTS", "LIRC_SET_REC_TIMEOUT")]
    assert near_misses(prompt, "print(charset_normalizer) and another_thing") == []
    assert code_like("_template_root") and code_like("getValue") and not code_like("template") and not code_like("abc_")
    assert one_edit("abc", "abd") and one_edit("abc", "abcd") and not one_edit("abc", "abc") and not one_edit("ab", "ba")


def test_traffic_mix_and_size() -> None:
    """Issue 48 item 2: the field suite as N sends in a deployment's mix, the same every time (seeded)."""
    suite = load_probe_file(PROBES_DIR / "field.toml")
    probes = volume_traffic.plan(suite, 2000)
    assert volume_traffic.sends(probes) == 2000
    assert [p.name for p in probes] == [p.name for p in volume_traffic.plan(suite, 2000)]
    meta = {k: Counter(p.meta[k] for p in probes) for k in ("prefix", "tools", "sampling", "turn", "concurrency")}
    assert set(meta["prefix"]) == {"warm", "cold", "none"} and set(meta["concurrency"]) == {1, 4, 16}
    assert set(meta["sampling"]) == {"greedy", "sampled"} and set(meta["turn"]) == {1, 2, 3}
    sent16 = sum(p.meta["copies"] for p in probes if p.meta["concurrency"] == 16)
    assert 0.7 < sent16 / 2000 < 0.9
    assert all(p.meta["copies"] == 1 for p in probes if p.meta["sampling"] == "sampled")
    assert all(p.sampling["temperature"] == 0.7 and p.sampling["top_p"] == 0.8 for p in probes if not p.greedy)
    warm = sorted({p.messages[0]["content"] for p in probes if p.meta["prefix"] == "warm" and p.messages}, key=len)
    assert len(warm) == 2 and warm[1].startswith(warm[0])  # one shared prefix (half of it with tools or turns)
    cold = [p.messages[0]["content"] for p in probes if p.meta["prefix"] == "cold" and p.messages]
    assert len(set(c.splitlines()[0] for c in cold)) == len(cold)  # each cold prefix its own
    assert len({p.name for p in probes}) == len(probes) and all(len(p.name) <= 255 for p in probes)


def test_traffic_from_a_tiny_or_empty_suite() -> None:
    """A completion-only suite of one probe still makes traffic; no suite or zero requests make none."""
    one = [Probe("p", "prose_en", prompt="Hello")]
    probes = volume_traffic.plan(one, 20)
    assert volume_traffic.sends(probes) == 20 and all(p.messages is None for p in probes)
    assert volume_traffic.plan([], 100) == [] and volume_traffic.plan(one, 0) == []


def test_an_answer_that_filled_the_context_is_judged_without_its_last_token() -> None:
    """Forced without its last token (no room for one more): the rest is judged, the last token is not."""
    assert greedy_finding([7, 8], [ROW])["verdict"] == OK
    assert greedy_finding([8, 7], [ROW])["verdict"] == CORRUPTED
    assert greedy_finding([7, 8, 8], [ROW])["verdict"] == UNSCORED  # two short: not a forcing of this answer


def test_the_shared_system_prompt_is_ascii() -> None:
    """Chinese prompts cost a byte-level tokenizer about three tokens a character: kept out of the long prefix."""
    suite = load_probe_file(PROBES_DIR / "field.toml")
    text = volume_traffic.system_text(suite)
    assert text.isascii() and len(text) <= volume_traffic.SYSTEM_CHARS + 60
    assert volume_traffic.system_text([Probe("zh", "prose_zh", prompt="写一首诗")]).isascii()
