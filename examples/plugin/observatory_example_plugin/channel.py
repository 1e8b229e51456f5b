"""A field channel: the suite's first probe sent twice in a row to each arm; both answers must equal base's.

It shows what a channel is made of (plan, measure, judge) with the smallest
useful check: a spec arm that answers the same request differently the
second time (state left behind by the first) fails it.
"""

from __future__ import annotations

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.view import ChannelView
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, PASS
from observatory.store.stored import Verdict

NAME = "example_repeat"
TIMES = 2


def plan(suite: list[Probe]) -> list[Probe]:
    if not suite:
        return []
    p = suite[0]
    return [Probe(name=f"{NAME}/{p.name}", category=p.category, messages=p.messages, prompt=p.prompt,
                  max_tokens=p.max_tokens, tools=p.tools, tool_choice=p.tool_choice, channel=NAME)]


def measure(run: LiveArm, probes: list[Probe]) -> None:
    assert run.client is not None  # a channel measures a live arm
    for probe in probes:
        for i in range(TIMES):
            resp = run.client.run(probe, stream=True)
            run.store_result(probe, resp, NAME, repeat=i)
            run.check_alive(resp)
            if not run.live:
                return


def judge(view: ChannelView) -> list[Verdict]:
    base = view.base
    ref = [r.token_ids for r in view.results(base)] if base is not None else []
    rows = []
    for arm in view.arms:
        got = [r.token_ids for r in view.results(arm)]
        if not got or not ref:
            continue
        same = all(list(g or []) == list(ref[0] or []) for g in got)
        rows.append(view.verdict(arm, PASS if same else FAIL,
                                 f"{len(got)} answers {'equal' if same else 'differ from'} base's first"))
    return rows


CHANNEL = Channel(name=NAME, title="Example: the same request twice", catches="state left behind by a request",
                  plan=plan, measure=measure, judge=judge, options={"times": TIMES})
