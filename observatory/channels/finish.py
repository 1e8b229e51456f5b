"""Channel ``finish``: stop strings, stop token ids, EOS and max_tokens inside a speculative run.

A speculative step emits up to k + 1 tokens at once; a stop found inside
such a step must cut the step there (the field saw text leak past a stop
string, a stop token id missed, and max_tokens overshot). For a few suite
probes (no tool calls; `PROBES_PER_SUITE`) every arm sends, streamed:

- ``eos``: the probe as it is (its own greedy output, ended by EOS or its
  max_tokens): the reference the other requests are made from;
- ``len-1``, ``len-2``: max_tokens set to that output's length minus 1 and 2,
  so the limit lands inside a speculative run;
- ``stop_str``: a stop string, the text of the token at 60% of that output;
- ``stop_id``: a stop token id, the id at 40% of it.

The requests are derived per arm from the arm's own ``eos`` output
(`derive`), and the judge derives them again from the stored results: where a
spec arm's ``eos`` output equals base's, the requests are the same and
finish_reason, token ids and text must equal base's. A difference is a FAIL,
or a WARN where base's A/A copy differs from base on that request too (not
attributable). Where the outputs differ already, the suite's token diff
judges it and this channel says "not comparable". A stop string found in the
text of a stop-string request is a FAIL on its own (output past a stop).
Cost: 5 requests of at most the probe's max_tokens per probe and arm.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import continuations
from observatory.channels.view import ChannelView
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, FAIL, PASS, SKIP, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "finish"
PROBES_PER_SUITE = 3
VARIANTS = ("eos", "len-1", "len-2", "stop_str", "stop_id")
STOP_STR_AT = 0.6
STOP_ID_AT = 0.4
MIN_TOKENS = 4  # an eos output shorter than this leaves no room inside it
NOT_COMPARABLE = "not comparable: this arm's own output differs (the suite's token diff judges it)"


def _pick(suite: list[Probe]) -> list[Probe]:
    """Suite probes without tools, one per category first (counting and recitation favoured), at most PROBES_PER_SUITE."""
    usable = [p for p in suite if not p.tools and not p.channel]
    order = sorted(usable, key=lambda p: (p.category not in ("counting", "sequence", "recitation"), p.category))
    seen: set[str] = set()
    picked: list[Probe] = []
    for p in order:
        if p.category not in seen:
            seen.add(p.category)
            picked.append(p)
    return picked[:PROBES_PER_SUITE]


def plan(suite: list[Probe]) -> list[Probe]:
    """Five requests per picked suite probe; the last four are completed per arm from the first's output."""
    out = []
    for p in _pick(suite):
        for v in VARIANTS:
            out.append(replace(p, name=f"{NAME}:{p.name}:{v}", channel=NAME, gates=[], expect={},
                               meta={"of": p.name, "variant": v}, sampling={}))
    return out


def derive(ids: list[int], texts: list[str], variant: str) -> dict[str, Any] | None:
    """The request parameters of VARIANT made from an ``eos`` output (its ids and per-token texts); None: no room."""
    n = len(ids)
    if variant == "eos":
        return {}
    if n < MIN_TOKENS:
        return None
    if variant in ("len-1", "len-2"):
        return {"max_tokens": n - int(variant[-1])}
    if variant == "stop_id":
        return {"stop_token_ids": [ids[int(n * STOP_ID_AT)]]}
    if variant == "stop_str" and len(texts) == n:
        for i in range(int(n * STOP_STR_AT), n - 1):
            s = texts[i].strip()
            if s and "\ufffd" not in s:
                return {"stop": [s]}
    return None


def request(probe: Probe, params: dict[str, Any]) -> Probe:
    """PROBE with PARAMS applied (max_tokens on the probe, the rest as sampling)."""
    params = dict(params)
    max_tokens = params.pop("max_tokens", probe.max_tokens)
    return replace(probe, max_tokens=max_tokens, sampling={**probe.sampling, **params})


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """On one live arm: each probe's ``eos`` request, then the others made from its output."""
    assert run.client is not None
    by_of: dict[str, dict[str, Probe]] = {}
    for p in probes:
        by_of.setdefault(p.meta["of"], {})[p.meta["variant"]] = p
    for variants in by_of.values():
        ref = run.client.run(variants["eos"], stream=True)
        run.store_result(variants["eos"], ref, NAME)
        run.check_alive(ref)
        if not ref.ok:
            continue
        for v, p in variants.items():
            params = None if v == "eos" else derive(ref.token_ids, ref.token_texts, v)
            if params is None:
                continue
            resp = run.client.run(request(p, params), stream=True)
            run.store_result(p, resp, NAME)
            run.check_alive(resp)


def _by_name(view: ChannelView, arm: StoredArm) -> dict[str, StoredResult]:
    return {view.probe(r).name: r for r in view.results(arm) if r.ok}


def _params(got: dict[str, StoredResult], probe: Probe) -> dict[str, Any] | None:
    ref = got.get(f"{NAME}:{probe.meta['of']}:eos")
    if ref is None:
        return None
    return derive(list(ref.token_ids or []), list(ref.token_texts or []), probe.meta["variant"])


def _same(a: StoredResult, b: StoredResult) -> bool:
    return (a.finish_reason, list(a.token_ids or []), a.text or "") == (b.finish_reason, list(b.token_ids or []), b.text or "")


def _eos_differs(mine: dict[str, StoredResult], ref: dict[str, StoredResult], probe: Probe) -> bool:
    """Whether this arm's ``eos`` output of PROBE's suite probe differs from base's in ids (a stop-string
    request keeps its own leak check). That output is the suite probe as it is, so the difference is the
    suite's token diff's to judge, with base's margins (a bf16 near-tie there read as a finish FAIL on
    ``eos``, ``len-1`` and ``len-2`` on every H200 field night, docs/design.md 3.7)."""
    a, b = mine.get(f"{NAME}:{probe.meta['of']}:eos"), ref.get(f"{NAME}:{probe.meta['of']}:eos")
    return a is not None and b is not None and diff_at(a, b) is not None


def _leak(r: StoredResult, params: dict[str, Any] | None) -> str | None:
    """A stop string found in the text of a stop-string request (it must end the text, unseen)."""
    for s in (params or {}).get("stop") or []:
        if s in (r.text or ""):
            return str(s)
    return None


def diff_at(a: StoredResult, b: StoredResult) -> int | None:
    """Index of the first differing token id (the shorter length when one is a prefix); None when equal."""
    ia, ib = list(a.token_ids or []), list(b.token_ids or [])
    if ia == ib:
        return None
    return next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))


def _first_diff(a: StoredResult, b: StoredResult) -> str:
    if a.finish_reason != b.finish_reason:
        return f"finish_reason {a.finish_reason} vs base's {b.finish_reason}"
    at = diff_at(a, b)
    if at is not None:
        return f"token ids differ at {at} ({len(a.token_ids or [])} vs base's {len(b.token_ids or [])} tokens)"
    return "same ids, different text"


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm judged against base: every request's finish_reason, ids and text against base's."""
    base = view.base
    if base is None:
        return []
    ref = _by_name(view, base)
    copies = [_by_name(view, a) for a in view.arms if view.role(a) == AA_COPY]
    rows: list[Verdict] = []
    for arm in view.arms:
        if arm.id == base.id or arm.status != "ok":
            continue
        mine = _by_name(view, arm)
        table: list[dict[str, Any]] = []
        fails: list[str] = []
        warns: list[str] = []
        for probe in view.probes.values():
            name = probe.name
            r, b = mine.get(name), ref.get(name)
            row: dict[str, Any] = {"probe": probe.meta["of"], "variant": probe.meta["variant"]}
            p_mine, p_base = _params(mine, probe), _params(ref, probe)
            row["request"] = str(p_base)[:80]
            if r is None or b is None:
                row["result"] = "not measured" if p_base is None else "missing"
                if r is None and b is not None and p_mine == p_base:
                    fails.append(f"{name}: no answer where base answered")
            elif p_mine != p_base or _eos_differs(mine, ref, probe):
                leak = _leak(r, p_mine)
                if leak is not None:  # its own stop string in its own text: a FAIL on its own
                    row["result"] = f"FAIL: output past the stop string {leak[:20]!r}"
                    fails.append(f"{name}: text runs past its stop string")
                else:
                    # the suite's token diff judges that difference (a WARN or FAIL there): not again here
                    row["result"] = NOT_COMPARABLE
            else:
                leak = _leak(r, p_mine)
                row.update(finish=r.finish_reason, base_finish=b.finish_reason, tokens=len(r.token_ids or []),
                           base_tokens=len(b.token_ids or []), preview=(r.text or "")[:80])
                if leak is not None and _leak(b, p_base) is None:
                    row["result"] = f"FAIL: output past the stop string {leak[:20]!r}"
                    fails.append(f"{name}: text runs past its stop string")
                elif _same(r, b):
                    row["result"] = "equal"
                else:
                    noisy = any(name in c and not _same(c[name], b) for c in copies)
                    diff = _first_diff(r, b)
                    row["result"] = ("WARN (base's A/A copy differs too): " if noisy else "FAIL: ") + diff
                    at = diff_at(r, b)
                    if at is not None:  # same ids: the finish and text columns show the difference
                        row.update(continuations(r, b, at))
                    (warns if noisy else fails).append(f"{name}: {diff}")
            table.append(row)
        details = {"table": table}
        apart = sum(row.get("result") == NOT_COMPARABLE for row in table)
        why_apart = (f"{apart} finish requests not comparable (this arm's own output differs: the suite's token "
                     "diff judges it)")
        if fails and view.role(arm) == AA_COPY:  # base against itself: the noise, never a FAIL
            warns, fails = [f"{f} (A/A copy: the engine's own non-determinism)" for f in fails] + warns, []
        if fails:
            rows.append(view.verdict(arm, FAIL, f"{len(fails)} finish request(s) differ from base: {fails[0]}",
                                     details))
        elif warns:
            rows.append(view.verdict(arm, WARN, f"{len(warns)} finish request(s) not attributable: {warns[0]}",
                                     details))
        elif not any(row.get("result") == "equal" for row in table):
            rows.append(view.verdict(arm, SKIP, f"not measurable: {why_apart}" if apart else
                                     "not measurable: no finish request answered on both arms", details))
        else:
            n = sum(row.get("result") == "equal" for row in table)
            rows.append(view.verdict(arm, PASS, f"{n} finish requests equal base's (finish_reason, ids, text)"
                                     + (f"; {why_apart}" if apart else ""), details))
    return rows


CHANNEL = Channel(
    name=NAME,
    title="Finish semantics: stop strings, stop ids, EOS, max_tokens inside a spec run",
    catches="output past a stop, a missed stop token id, max_tokens overshot or cut early on a speculative step",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("past_stop",),
    options={"probes": PROBES_PER_SUITE, "variants": list(VARIANTS), "stop_str_at": STOP_STR_AT,
             "stop_id_at": STOP_ID_AT},
)
