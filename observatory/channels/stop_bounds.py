"""Channel ``stop_bounds``: stopping parameters at the natural length, one below and one above it.

A speculative step verifies up to k drafts at once, so a stop rule that counts
one position wrong on a draft row stops an answer one token early or late
(the field: ``min_tokens`` one short exactly at the natural stop, found from
outside; the ``params`` channel sends ``min_tokens`` past the natural stop
only, where such a fault never fires). For a few suite probes without tools
(`PROBES`, one per category, code last) every arm sends, greedy and streamed:

- ``natural``: the probe as it is. Its n generated tokens (the last one EOS
  when it stopped by itself) set the boundary: L = n - 1 tokens before EOS;
- ``past_eos``: the probe with ``ignore_eos`` and ``max_tokens`` n + 3: the
  tokens the model writes past its own stop, for the cases "one above";
- ``max_tokens`` at n - 1, n, n + 1 (the limit on the last token before EOS,
  on EOS itself, one past it);
- ``min_tokens`` at L - 1, L, L + 1 (``max_tokens`` n + `ROOM`): at L + 1 the
  EOS the model wants at position L must be masked;
- ``stop_token_ids`` and ``stop`` (a string) that fire on the token at
  L - 2 ("one below"; L - 3 or L - 4 where that id or text occurs earlier),
  at L - 1 (the last before the natural stop) and, with ``ignore_eos``, at
  L + 1 or L + 2 of ``past_eos`` (past the natural stop). A stop fires at
  its first occurrence, so an id is taken only where it does not occur
  before, and a string is the shortest text of 1 to 4 tokens ending on the
  position whose first occurrence ends there (`stop_id_at`,
  `stop_string_at`): where none exists the case is not sent.

Each request after the first two is derived from the arm's own ``natural`` and
``past_eos`` answers (`derive`); the judge derives them again from the stored
answers. Where the references a case is derived from equal base's (``natural``;
``past_eos`` too for the cases one above), its request is base's and
finish_reason, stop_reason, token ids, text and usage.completion_tokens must
equal base's: a difference is a FAIL, a WARN where base's A/A copy differs from
base on that request too. Where those references differ already (a near-tie
flip), the request is "not comparable" (the suite's token diff judges the
answer). The ``past_eos`` reference itself (EOS ignored) is judged so too,
where the natural answers agree.
The rules hold on every arm whatever base answered (`broken_rules`): no more
ids than ``max_tokens``; no stop token before ``min_tokens`` tokens; a stop
id only as the last id; a stop string never in the text. A rule broken on a
spec arm and kept on base is a FAIL; broken on base too, a WARN (the
engine's own, not speculation's).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.channels.finish import diff_at
from observatory.channels.pairs import continuations, same_tokens
from observatory.judge.apply_gates import tokens_complete
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAIL, PASS, SKIP, UNJUDGED, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "stop_bounds"
PROBES = 4  # suite probes whose natural answers stop by themselves, each given every case
CANDIDATES = 8  # suite probes tried for them, in order (one per category first; code, which rarely stops, last)
PAST = 3  # tokens asked past the natural stop (past_eos and the cases one above)
ROOM = 8  # max_tokens past the natural length for the min_tokens cases
REFERENCES = ("natural", "past_eos")
CASES = ("max_tokens:-1", "max_tokens:0", "max_tokens:+1", "min_tokens:-1", "min_tokens:0", "min_tokens:+1",
         "stop_id:-1", "stop_id:0", "stop_id:+1", "stop_str:-1", "stop_str:0", "stop_str:+1")
EQUAL_WITHOUT_IDS = "equal but for ids the stream withheld (compared without them)"
NOT_COMPARABLE = "not comparable: this arm's own reference differs from base's (the suite's token diff judges it)"


def _pick(suite: list[Probe]) -> list[Probe]:
    """Suite probes without tools, one per category first, code last, at most CANDIDATES."""
    usable = sorted((p for p in suite if not p.tools and not p.channel), key=lambda p: p.category == "code")
    first: dict[str, Probe] = {}
    for p in usable:
        first.setdefault(p.category, p)
    rest = [p for p in usable if p not in first.values()]
    return [*first.values(), *rest][:CANDIDATES]


def plan(suite: list[Probe]) -> list[Probe]:
    """The two references and every case per picked probe; the cases are completed per arm from the references."""
    return [replace(p, name=f"{NAME}:{p.name}:{c}", channel=NAME, gates=[], expect={}, sampling={},
                    meta={"of": p.name, "case": c})
            for p in _pick(suite) for c in (*REFERENCES, *CASES)]


def stop_id_at(ids: list[int], positions: list[int]) -> int | None:
    """The first of POSITIONS whose id does not occur before it (a stop id fires at its first occurrence)."""
    return next((q for q in positions if 0 <= q < len(ids) and ids[q] not in ids[:q]), None)


def stop_string_at(texts: list[str], positions: list[int]) -> tuple[int, str] | None:
    """The first of POSITIONS where a stop string completes: the shortest text of 1 to 4 tokens ending there
    whose first occurrence in the answer ends inside that token (so the stop fires exactly on it)."""
    for q in positions:
        if not 0 <= q < len(texts):
            continue
        before, upto = "".join(texts[:q]), "".join(texts[:q + 1])
        for start in range(q, max(q - 4, -1), -1):
            s = "".join(texts[start:q + 1])
            if s.strip() and "\ufffd" not in s and upto.find(s) + len(s) > len(before):
                return q, s
    return None


def derive(natural: tuple[list[int], list[str], str | None], past: tuple[list[int], list[str]] | None,
           case: str) -> dict[str, Any] | None:
    """The parameters of CASE made from the ``natural`` answer (ids, per-token texts, finish_reason) and the
    ``past_eos`` answer (ids, texts); None where the answers leave no such boundary.

    A stop lands where it fires first: an id that occurs earlier in the answer, or a string found earlier,
    would stop it there instead; so "one below" takes the nearest of L - 2 .. L - 4 where it fires first,
    "at" L - 1 only, "one above" the first of L + 1, L + 2 of ``past_eos``."""
    ids, texts, why = natural
    n = len(ids)
    if case == "natural":
        return {}
    if case == "past_eos":
        return {"ignore_eos": True, "max_tokens": n + PAST} if why == "stop" and n >= 1 else None
    if why != "stop" or n < 3:  # no natural stop (cut by max_tokens): nothing to place around it
        return None
    kind, _, at = case.partition(":")
    step = int(at)
    if kind == "max_tokens":
        return {"max_tokens": n + step}
    last = n - 1  # L: the tokens before EOS
    if kind == "min_tokens":
        return {"min_tokens": last + step, "max_tokens": n + ROOM}
    extra: dict[str, Any] = {}
    if step < 0:
        where, source = [last - 2, last - 3, last - 4], (ids, texts)
    elif step == 0:
        where, source = [last - 1], (ids, texts)
    else:
        if past is None:
            return None
        # the natural stop's own token (EOS) stays in the ids with EOS ignored, but not in the text
        texts_past = [t if i != last else "" for i, t in enumerate(past[1])]
        where, source, extra = [last + 1, last + 2], (past[0], texts_past), {"ignore_eos": True, "max_tokens": n + PAST}
    if kind == "stop_id":
        q = stop_id_at(source[0], where)
        return None if q is None else {"stop_token_ids": [source[0][q]], **extra}
    if len(source[1]) != len(source[0]):
        return None
    found = stop_string_at(source[1], where)
    return None if found is None else {"stop": [found[1]], **extra}


def request(probe: Probe, params: dict[str, Any]) -> Probe:
    """PROBE with PARAMS applied (max_tokens on the probe, the rest as sampling)."""
    params = dict(params)
    max_tokens = params.pop("max_tokens", probe.max_tokens)
    return replace(probe, max_tokens=max_tokens, sampling={**probe.sampling, **params})


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """On one live arm: the candidates' natural answers in order, and for the first PROBES that stopped by
    themselves, the ``past_eos`` reference and the cases made from the two."""
    client = run.client
    assert client is not None
    by_of: dict[str, dict[str, Probe]] = {}
    for p in probes:
        by_of.setdefault(p.meta["of"], {})[p.meta["case"]] = p
    done = 0
    for cases in by_of.values():
        if done >= PROBES or not run.live:
            break
        run.reporter.step(run.arm, NAME, done, PROBES)
        nat = client.run(cases["natural"], stream=True)
        run.store_result(cases["natural"], nat, NAME)
        run.check_alive(nat)
        if not nat.ok or nat.finish_reason != "stop":
            continue
        done += 1
        natural = (nat.token_ids, nat.token_texts, nat.finish_reason)
        past = None
        params = derive(natural, None, "past_eos")
        if params is not None:
            got = client.run(request(cases["past_eos"], params), stream=True)
            run.store_result(cases["past_eos"], got, NAME)
            run.check_alive(got)
            past = (got.token_ids, got.token_texts) if got.ok else None
        for case in CASES:
            params = derive(natural, past, case)
            if params is None or not run.live:
                continue
            resp = client.run(request(cases[case], params), stream=True)
            run.store_result(cases[case], resp, NAME)
            run.check_alive(resp)


# -- judging ---------------------------------------------------------------------------------------------------
def _by_name(view: ChannelView, arm: StoredArm) -> dict[str, StoredResult]:
    return {view.probe(r).name: r for r in view.results(arm) if r.ok}


def params_of(got: dict[str, StoredResult], probe: Probe) -> dict[str, Any] | None:
    """PROBE's parameters as its arm derived them from its stored references (None: not derivable)."""
    of = probe.meta["of"]
    nat, past = got.get(f"{NAME}:{of}:natural"), got.get(f"{NAME}:{of}:past_eos")
    if nat is None:
        return None
    natural = (list(nat.token_ids or []), list(nat.token_texts or []), nat.finish_reason)
    return derive(natural, (list(past.token_ids or []), list(past.token_texts or [])) if past else None,
                  probe.meta["case"])


def same_references(got: dict[str, StoredResult], ref: dict[str, StoredResult], probe: Probe) -> bool:
    """Whether the arm's references PROBE's case is derived from (its ``natural`` answer; ``past_eos`` too for the
    cases one above) have base's token ids (GOT against REF): only then are its requests base's, answer for answer
    (a near-tie flip in a reference makes the same parameters ask for another continuation)."""
    of = probe.meta["of"]
    used = REFERENCES if probe.meta["case"].endswith(":+1") else REFERENCES[:1]  # "+1" cases read past_eos too
    for case in used:
        a, b = got.get(f"{NAME}:{of}:{case}"), ref.get(f"{NAME}:{of}:{case}")
        if not ((a is None and b is None) or same_tokens(a, b)):
            return False
    return True


def broken_rules(r: StoredResult, params: dict[str, Any] | None, eos_ended: bool) -> list[str]:
    """The stopping rules R breaks under PARAMS (EOS_ENDED: it ended on the model's own EOS, read from a
    finish_reason "stop" with no stop_reason and EOS not ignored)."""
    if not params:
        return []
    ids = list(r.token_ids or [])
    out = []
    limit = params.get("max_tokens")
    if isinstance(limit, int) and len(ids) > limit:
        out.append(f"{len(ids)} tokens past max_tokens {limit}")
    least = params.get("min_tokens")
    stop_ids = params.get("stop_token_ids") or []
    ended_on_stop = r.finish_reason == "stop" and (eos_ended or (ids and ids[-1] in stop_ids))
    if isinstance(least, int) and ended_on_stop and len(ids) - 1 < least:
        out.append(f"stopped after {len(ids) - 1} tokens, fewer than min_tokens {least}")
    early = [t for t in ids[:-1] if t in stop_ids]
    if early:
        out.append(f"stop token id {early[0]} inside the answer, not at its end")
    for s in params.get("stop") or []:
        if s in (r.text or ""):
            out.append(f"stop string {s[:20]!r} in the text")
    return out


def _eos_ended(r: StoredResult, params: dict[str, Any] | None) -> bool:
    return r.finish_reason == "stop" and r.stop_reason is None and not (params or {}).get("ignore_eos")


def _facts(r: StoredResult, ids: bool = True) -> tuple[Any, ...]:
    """What a request is compared by; without the ids where IDS is False (a stream that withheld some)."""
    return (r.finish_reason, r.stop_reason, list(r.token_ids or []) if ids else None, r.text or "",
            (r.usage or {}).get("completion_tokens"))


def _first_diff(a: StoredResult, b: StoredResult, ids: bool = True) -> str:
    names = ("finish_reason", "stop_reason", "token ids", "text", "usage.completion_tokens")
    for name, x, y in zip(names, _facts(a, ids), _facts(b, ids)):
        if x != y:
            if name == "token ids":
                return f"token ids differ at {diff_at(a, b)} ({len(x)} vs base's {len(y)} tokens)"
            return f"{name} {str(x)[:40]!r} vs base's {str(y)[:40]!r}"
    return "equal"


def _short_of(r: StoredResult, b: StoredResult) -> str:
    """Which side's stream withheld ids: "here 30 of 31", "base 30 of 31"."""
    return ", ".join(f"{who} {len(x.token_ids or [])} of {(x.usage or {}).get('completion_tokens')}"
                     for who, x in (("here", r), ("base", b)) if not tokens_complete(x))


def _row(probe: Probe, r: StoredResult | None, b: StoredResult | None, p_mine: dict[str, Any] | None,
         p_base: dict[str, Any] | None, copies: list[dict[str, StoredResult]]) -> tuple[dict[str, Any], str, str]:
    """(table row, FAIL | WARN | PASS | "", what) for one case on one arm ("": nothing judged)."""
    name = probe.name
    row: dict[str, Any] = {"probe": probe.meta["of"], "case": probe.meta["case"], "request": str(p_mine)[:80]}
    if r is None:
        row["result"] = "not sent (no such boundary)" if p_mine is None else "no answer"
        lost = p_mine is not None and b is not None and p_mine == p_base
        return row, FAIL if lost else "", f"{name}: no answer where base answered" if lost else ""
    broken = broken_rules(r, p_mine, _eos_ended(r, p_mine))
    base_broken = broken_rules(b, p_base, _eos_ended(b, p_base)) if b is not None and p_base == p_mine else []
    row.update(finish=r.finish_reason, tokens=len(r.token_ids or []), preview=(r.text or "")[:80])
    if broken:
        level = WARN if base_broken else FAIL
        row["result"] = f"{level}: {broken[0]}" + (" (base breaks it too)" if base_broken else "")
        return row, level, f"{name}: {broken[0]}"
    if b is None or p_mine != p_base:
        row["result"] = NOT_COMPARABLE
        return row, "", ""
    if base_broken:  # base is wrong here and this arm is not: nothing to hold against base
        row["result"] = f"keeps the rule base breaks ({base_broken[0]}: base's own verdict shows it)"
        return row, "", ""
    row.update(base_finish=b.finish_reason, base_tokens=len(b.token_ids or []))
    # a stream that carried fewer ids than its usage counts (vLLM 0.26 drops a streamed token whose text is empty,
    # the end token's under ignore_eos, on base: 30 ids for 31 tokens) is compared without its ids
    whole = tokens_complete(r) and tokens_complete(b)
    if _facts(r, whole) == _facts(b, whole):
        row["result"] = "equal" if whole else f"{EQUAL_WITHOUT_IDS}: {_short_of(r, b)}"
        return row, PASS, ""
    diff = _first_diff(r, b, whole)
    noisy = any(name in c and _facts(c[name], whole) != _facts(b, whole) for c in copies)
    row["result"] = ("WARN (base's A/A copy differs too): " if noisy else "FAIL: ") + diff
    at = diff_at(r, b)
    if at is not None:
        row.update(continuations(r, b, at))
    return row, WARN if noisy else FAIL, f"{name}: {diff}"


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm judged against base: the stopping rules on its own answers, and each request against base's."""
    base = view.base
    if base is None:
        return [view.verdict(a, UNJUDGED, "no base arm to compare with") for a in view.arms]
    ref = _by_name(view, base)
    copies = [_by_name(view, a) for a in view.arms if view.role(a) == AA_COPY]
    rows: list[Verdict] = []
    for arm in view.arms:
        if arm.status != "ok":
            continue
        mine = ref if arm.id == base.id else _by_name(view, arm)
        table: list[dict[str, Any]] = []
        found: dict[str, list[str]] = {FAIL: [], WARN: [], PASS: []}
        cases: dict[str, set[str]] = {FAIL: set(), WARN: set(), PASS: set()}
        for probe in view.probes.values():
            if probe.meta["case"] == REFERENCES[0]:
                continue  # the natural answer: the suite's token diff judges its like (past_eos is judged: EOS ignored)
            r, b = mine.get(probe.name), ref.get(probe.name)
            p_mine, p_base = params_of(mine, probe), params_of(ref, probe)
            if r is None and b is None and p_mine is None and p_base is None:
                continue  # no such boundary on either arm (the answer did not stop by itself): nothing sent
            if arm.id == base.id or not same_references(mine, ref, probe):
                b = None  # base against itself, or an arm whose references parted from base's: its rules only
            row, level, what = _row(probe, r, b, p_mine, p_base, copies)
            table.append(row)
            if level:
                found[level].append(what or probe.name)
                cases[level].add(probe.meta["case"])
        rows.append(_verdict(view, arm, table, found, cases))
    return rows


def _cases(found: set[str]) -> str:
    """The cases of a verdict's requests, in CASES order: "(min_tokens:-1, min_tokens:0)"."""
    return "(" + ", ".join(c for c in (*CASES, REFERENCES[1]) if c in found) + ")"


def _verdict(view: ChannelView, arm: StoredArm, table: list[dict[str, Any]], found: dict[str, list[str]],
             cases: dict[str, set[str]]) -> Verdict:
    """The arm's verdict; its reason names every case a FAIL or WARN was found in (a known-findings ledger
    covers a known engine bug by its cases, and a failure in any other case still counts)."""
    details = {"table": table}
    fails, warns = found[FAIL], found[WARN]
    role = view.role(arm)
    if fails and role in (AA_COPY, BASE):  # base against itself or its copy: the engine's own, never a FAIL
        warns, fails = [f"{f} (the engine's own: no speculation here)" for f in fails] + warns, []
        cases = {**cases, WARN: cases[WARN] | cases[FAIL], FAIL: set()}
    if fails:
        return view.verdict(arm, FAIL, f"{len(fails)} stopping request(s) wrong at the boundary "
                            f"{_cases(cases[FAIL])}: {fails[0]}", details)
    if warns:
        return view.verdict(arm, WARN, f"{len(warns)} stopping request(s) not attributable {_cases(cases[WARN])}: "
                            f"{warns[0]}", details)
    equal = sum(row.get("result") == "equal" or str(row.get("result", "")).startswith(EQUAL_WITHOUT_IDS)
                for row in table)
    if role == BASE:
        checked = sum(1 for row in table if "tokens" in row)
        return view.verdict(arm, PASS if checked else SKIP, f"the reference: every stopping rule holds on "
                            f"{checked} requests" if checked else "not measurable: no stopping request answered",
                            details)
    if not equal:
        apart = sum(row.get("result") == NOT_COMPARABLE for row in table)
        return view.verdict(arm, SKIP, f"not measurable: none of {len(table)} requests comparable with base's"
                            + (f" ({apart} not comparable: this arm's own reference differs)" if apart else ""),
                            details)
    return view.verdict(arm, PASS, f"{equal} stopping requests at the boundaries equal base's (finish and stop "
                        "reasons, ids, text, usage); every rule holds", details)


CHANNEL = Channel(
    name=NAME,
    title="Stopping parameters at their boundaries",
    catches="min_tokens, max_tokens, stop strings and stop ids one token off at the natural stop on a spec step",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("min_tokens_short",),
    options={"probes": PROBES, "cases": list(CASES), "past": PAST, "room": ROOM},
)
