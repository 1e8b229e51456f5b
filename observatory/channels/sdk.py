"""Channel ``sdk``: the official openai client as a conformance judge of every answer (issue 28 item 7).

Real applications read these servers through the ``openai`` package. Every
correctness-pass answer an arm gave (the suite's warm-up, streamed,
non-streamed and batch requests and every other channel's requests; never a
timed pass) was read a second time, when it arrived, by the SDK's own types
and stream helper (`observatory.client.openai_sdk`; the verdict is stored with the
result). This channel sends nothing of its own; it judges those stored
verdicts:

- ``sdk``: the SDK rejects no answer (a whole answer not a ``ChatCompletion``
  / ``Completion``, a streamed event not a ``ChatCompletionChunk`` /
  ``Completion``, a stream its helper cannot accumulate), and reads each the
  way the observatory's lean reader did (content, tool calls, finish reason):
  else what every gate judged is not what an SDK application gets.
- ``sdk:stream``: each streamed suite answer, accumulated by the SDK, equals
  the SDK's reading of the whole (non-streamed) answer of the same probe on
  the same arm: content, tool calls (type, name, arguments; ids are per
  request) and finish reason. Not exercised where the arm sent no whole
  answers (``--no-diffs``).

On an arm judged against base, a problem base has too on the same probe and
request kind is a WARN "not attributable" (the serving layer's, with or
without speculation; base's own row FAILs it); one base does not have is a
FAIL. The SDK's error is named as it raised it (bounded; the report escapes
it). Fault ``sdk_object`` (`observatory.faults.field_sdk`): streamed chunks of
a speculative step carry a wrong ``object`` type, which the lean reader never
reads. Cost: no requests; the SDK's reading, about 4-5x the lean reader's CPU
per token, on the correctness passes only (docs/channels.md).
"""

from __future__ import annotations

from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.view import ChannelView
from observatory.channels.volume_traffic import NAME as VOLUME
from observatory.client.openai_sdk import calls_of
from observatory.judge.rates import excess
from observatory.model.probes import Probe
from observatory.model.vocabulary import BASE, FAIL, NOTE, PASS, SKIP
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "sdk"
# At most this many problems listed per verdict (the counts cover them all).
MAX_LISTED = 20
_FIELDS = ("content", "tool_calls", "finish_reason")


def plan(suite: list[Probe]) -> list[Probe]:
    """No probes of its own: it judges the answers the other passes stored."""
    return []


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Nothing to send (the client read every correctness-pass answer with the SDK as it came)."""


def sdk_reading(r: StoredResult) -> dict[str, Any]:
    """What the SDK read in a stored answer: the lean reader's fields, overridden where the SDK differed."""
    lean = {"content": (r.content if r.content is not None else r.text) or None,
            "tool_calls": calls_of(r.tool_calls), "finish_reason": r.finish_reason}
    lean.update((r.sdk or {}).get("differs") or {})
    return lean


def _comparable(reading: dict[str, Any]) -> dict[str, Any]:
    calls = reading.get("tool_calls")
    return {"content": reading.get("content"), "finish_reason": reading.get("finish_reason"),
            "tool_calls": [{k: c.get(k) for k in ("type", "name", "arguments")} for c in calls] if calls else None}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "..."


def problems(results: list[StoredResult]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Each SDK rejection or disagreement with the lean reader among RESULTS (timed passes left out), and counts."""
    found: list[dict[str, Any]] = []
    counts = {"answers": 0, "streamed": 0, "whole": 0, "not_read": 0}
    for r in results:
        if r.mode == "timed":
            continue
        if r.sdk is None:
            if r.ok or (r.error or "").startswith("malformed response"):
                counts["not_read"] += 1
            continue
        counts["answers"] += 1
        counts["streamed" if "events" in r.sdk else "whole"] += 1
        if r.sdk.get("error"):
            found.append({"result": r, "kind": "rejected", "what": str(r.sdk["error"])})
        elif r.sdk.get("differs"):
            diff = r.sdk["differs"]
            what = "; ".join(f"{k}: the SDK read {_shown(v)}" for k, v in diff.items())
            found.append({"result": r, "kind": "reads differently", "what": what})
    return found, counts


def stream_mismatches(results: list[StoredResult], suite: set[int]) -> tuple[list[dict[str, Any]], int, int]:
    """Streamed suite answers whose SDK accumulation is not the SDK's reading of the same probe's whole answer.

    Returns (mismatches, pairs compared, streamed answers without a whole answer to compare with).
    """
    # an answer the SDK read to the end (a rejected stream may still accumulate: "differs" is its reading)
    whole = {r.probe_id: r for r in results if r.mode == "nonstream" and r.sdk and "differs" in r.sdk}
    found: list[dict[str, Any]] = []
    compared = missing = 0
    for r in results:
        if r.mode != "stream" or r.probe_id not in suite or not r.sdk or "differs" not in r.sdk:
            continue
        w = whole.get(r.probe_id)
        if w is None:
            missing += 1
            continue
        compared += 1
        mine, ref = _comparable(sdk_reading(r)), _comparable(sdk_reading(w))
        bad = [k for k in _FIELDS if mine[k] != ref[k]]
        if bad:
            what = "; ".join(f"{k}: stream {_shown(mine[k])}, whole {_shown(ref[k])}" for k in bad)
            found.append({"result": r, "kind": "stream is not the whole answer", "what": what})
    return found, compared, missing


def _key(p: dict[str, Any]) -> tuple[int, str, str]:
    r: StoredResult = p["result"]
    return r.probe_id, r.mode, p["kind"]


def _volume(found: list[dict[str, Any]], results: list[StoredResult]) -> tuple[int, int]:
    """(problems, answers the SDK read) among the volume replay's answers (`VOLUME` mode)."""
    return (sum(1 for p in found if p["result"].mode == VOLUME),
            sum(1 for r in results if r.mode == VOLUME and r.sdk))


def _verdict(view: ChannelView, arm: StoredArm, part: str | None, found: list[dict[str, Any]],
             base_keys: set[tuple[int, str, str]] | None, names: dict[int, str], details: dict[str, Any],
             clean: str, unexercised: str | None,
             volume: tuple[tuple[int, int], tuple[int, int]] | None = None) -> Verdict:
    role = view.role(arm)
    against_base = role != BASE and base_keys is not None  # the A/A copy too: what base shows is the engine's
    table: list[dict[str, Any]] = []
    fails = unshared_volume = 0  # problems base does not share; those of them in the volume replay
    for p in found:
        r: StoredResult = p["result"]
        as_base = base_keys is not None and _key(p) in base_keys
        fails += not (against_base and as_base)
        unshared_volume += r.mode == VOLUME and not (against_base and as_base)
        if len(table) < MAX_LISTED:
            table.append({"probe": names.get(r.probe_id, str(r.probe_id)), "request": r.mode, "repeat": r.repeat,
                          "problem": p["kind"], "sdk_says": p["what"],
                          "base": "same" if as_base else ("-" if base_keys is None or role == BASE else "clean")})
    details = {**details, "problems": len(found), "table": table}
    sdk_version = details.get("sdk")
    if not found:
        if unexercised:
            return view.verdict(arm, SKIP, f"not exercised: {unexercised}", details, part=part)
        return view.verdict(arm, PASS, clean, details, part=part)
    first = found[0]
    what = f"{len(found)} answer(s): first {names.get(first['result'].probe_id, '?')} ({first['result'].mode}): " \
           f"{first['kind']}: {first['what']}"
    if fails and volume is not None and unshared_volume == fails and volume[1][1] > 0:
        # every unshared problem is in the volume replay, thousands of answers that differ run to run even
        # on base (no request of it is base's twin): judged as a rate against base's own (issue 46 item 2)
        (k, n), (k0, n0) = (fails, volume[0][1]), volume[1]
        level, p_value, _ = excess(k, n, k0, n0)
        rate = f"{k} of {n} volume answers against base's {k0} of {n0}; p = {p_value:.2g}"
        details = {**details, "volume_rate": {"k": k, "n": n, "k0": k0, "n0": n0, "p": p_value}}
        if level is None:
            return view.verdict(arm, NOTE, f"openai {sdk_version}: {what} (within base's rate: {rate})", details,
                                part=part)
        return view.verdict(arm, level, f"openai {sdk_version}: {what} ({rate})", details, part=part)
    if fails:
        return view.verdict(arm, FAIL, f"openai {sdk_version}: {what}", details, part=part)
    # every problem is one base shows on the same request: the engine's, within its control (issue 46: a NOTE)
    return view.verdict(arm, NOTE, f"openai {sdk_version}: {what} (base has the same problems: not attributable "
                                   "to this arm)", details, part=part)


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm: the SDK's rejections and readings (``sdk``), and each stream against its whole answer (``sdk:stream``)."""
    probe_rows = view.store.probes(view.session_id)
    names = {p.id: p.name for p in probe_rows}
    suite = {p.id for p in probe_rows if not (p.definition or {}).get("channel")}
    per_arm = {a.id: [r for r in view.stored(a) if r.mode != "timed"] for a in view.arms}
    base = view.base
    base_parse: set[tuple[int, str, str]] | None = None
    base_stream: set[tuple[int, str, str]] | None = None
    base_volume: tuple[int, int] | None = None
    if base is not None:
        base_found = problems(per_arm[base.id])[0]
        base_parse = {_key(p) for p in base_found}
        base_volume = _volume(base_found, per_arm[base.id])
        base_stream = {_key(p) for p in stream_mismatches(per_arm[base.id], suite)[0]}
    rows = []
    for arm in view.arms:
        results = per_arm[arm.id]
        found, counts = problems(results)
        versions = sorted({str(r.sdk.get("sdk")) for r in results if r.sdk})
        details: dict[str, Any] = {**counts, "sdk": ", ".join(versions) or "-",
                                   "sdk_ms": round(sum(float(r.sdk.get("ms") or 0) for r in results if r.sdk), 1)}
        rows.append(_verdict(view, arm, None, found, base_parse, names, details,
                             f"the openai SDK ({details['sdk']}) accepts all {counts['answers']} answers "
                             f"({counts['streamed']} streamed, {counts['whole']} whole) and reads them as the "
                             "observatory did",
                             None if counts["answers"] else "no answer was read by the SDK",
                             None if base_volume is None else (_volume(found, results), base_volume)))
        mism, compared, missing = stream_mismatches(results, suite)
        sdetails = {"compared": compared, "without_whole_answer": missing, "sdk": details["sdk"]}
        rows.append(_verdict(view, arm, "stream", mism, base_stream, names, sdetails,
                             f"all {compared} streamed answers accumulate (the SDK's stream helper) to the whole "
                             "answer of the same probe",
                             None if compared else (f"{missing} streamed answers and no whole answer to compare "
                                                    "with (--no-diffs sends none)" if missing else
                                                    "no streamed answer the SDK could accumulate")))
    return rows


CHANNEL = Channel(
    name=NAME,
    title="The openai SDK as a conformance judge",
    catches="answers the official client rejects or reads otherwise; streams that accumulate to another answer",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("sdk_object",),
    options={"max_listed": MAX_LISTED},
)
