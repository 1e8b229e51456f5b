"""A session's reasons read at a glance: repeated findings of one cause as one line with a count (issue 46 item 5).

`observatory.judge.verdict.decide` keeps one `Reason` per finding (``show --json`` lists
them all); every renderer that lists them as text (the terminal's summary and
closing block, the gate's own lines, ``judge``, JUnit's session case, the HTML
banner) goes through `group_reasons`, so ten near-tie divergences of one arm
read as one line in every output::

    mtp1: token_diff: 10 probes (json-1, code-2, prose-3 and 7 more); first, json-1: near-tie ...

Findings are of one cause when they are about probes and share their level,
arm, gate, code and known-findings entry; a reason about no probe (an arm's,
a channel's, the session's) stays a line of its own, as does a lone finding.
Groups keep the reasons' order (worst level first). KNOWN and NOTE are
listed apart from the levels that count (`split`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from observatory.model.read_model import Reason, SessionVerdict
from observatory.model.vocabulary import COUNTED_LEVELS, KNOWN, NOTE, REASON_LEVELS

SHOWN_PROBES = 3  # probes named in a group's line before "and N more"


@dataclass(frozen=True)
class ReasonGroup:
    """Reasons of one cause (one reason, or several about probes that share level, arm, gate, code and entry)."""

    reasons: tuple[Reason, ...]

    @property
    def level(self) -> str:
        """The group's level."""
        return self.reasons[0].level

    @property
    def first(self) -> Reason:
        """The group's first reason (its evidence link, its wording)."""
        return self.reasons[0]

    @property
    def count(self) -> int:
        """How many findings the group holds."""
        return len(self.reasons)

    @property
    def known(self) -> Any:
        """The known-findings entry the group's reasons carry, if any."""
        return self.first.known

    @property
    def text(self) -> str:
        """The group as one line: the reason itself when alone, else the arm, the gate, how many probes and
        which, and the first one's wording."""
        r = self.first
        if self.count == 1:
            return r.text
        probes = list(dict.fromkeys(x.probe for x in self.reasons if x.probe))
        shown = ", ".join(probes[:SHOWN_PROBES]) + (f" and {len(probes) - SHOWN_PROBES} more"
                                                    if len(probes) > SHOWN_PROBES else "")
        what = r.gate or "requests"
        prefix = f"{r.arm} / {r.probe}: " + (f"{r.gate}: " if r.gate else "")
        detail = r.text[len(prefix):] if r.text.startswith(prefix) else r.text
        many = f"{self.count} findings on {len(probes)} probes" if self.count != len(probes) else f"{self.count} probes"
        return f"{r.arm}: {what}: {many} ({shown}); first, {r.probe}: {detail}"

    def line(self) -> str:
        """``LEVEL: text``; a KNOWN group's line names its ledger entry first (``KNOWN ID: text``)."""
        known = self.known.get("id") if isinstance(self.known, Mapping) and self.level == KNOWN else None
        return f"{self.level} {known}: {self.text}" if known else f"{self.level}: {self.text}"


def _key(r: Reason, i: int) -> tuple[Any, ...]:
    if r.probe is None:
        return ("alone", i)
    return (r.level, r.arm, r.gate, r.code, r.known.get("id") if isinstance(r.known, Mapping) else None)


def group_reasons(reasons: Iterable[Reason], levels: Sequence[str] = REASON_LEVELS) -> list[ReasonGroup]:
    """REASONS of LEVELS in groups of one cause, worst level first, each group where its first reason was."""
    groups: dict[tuple[Any, ...], list[Reason]] = {}
    for i, r in enumerate(reasons):
        if r.level in levels:
            groups.setdefault(_key(r, i), []).append(r)
    out = [ReasonGroup(tuple(rs)) for rs in groups.values()]
    order = {lv: i for i, lv in enumerate(REASON_LEVELS)}
    return sorted(out, key=lambda g: order.get(g.level, len(order)))  # stable: first appearance within a level


def verdict_lines(verdict: SessionVerdict, levels: Sequence[str] = COUNTED_LEVELS) -> list[str]:
    """The verdict's reasons of LEVELS as grouped lines (``LEVEL: text``)."""
    return [g.line() for g in group_reasons(verdict.reasons, levels)]


def split(verdict: SessionVerdict) -> tuple[list[ReasonGroup], list[ReasonGroup], list[ReasonGroup]]:
    """(what counts, KNOWN, NOTE): the verdict's grouped reasons, the counted ones apart from the rest."""
    groups = group_reasons(verdict.reasons)
    return ([g for g in groups if g.level in COUNTED_LEVELS], [g for g in groups if g.level == KNOWN],
            [g for g in groups if g.level == NOTE])


def known_summary(verdict: SessionVerdict) -> str | None:
    """"N known findings (ID x3, ...), not counted" for the verdict's KNOWN reasons, or None when it has none."""
    counts: dict[str, int] = {}
    for r in verdict.reasons:
        if r.level == KNOWN:
            key = str(r.known.get("id")) if isinstance(r.known, Mapping) else "?"
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    total = sum(counts.values())
    return (f"{total} known finding{'s' if total != 1 else ''}, not counted: "
            + ", ".join(f"{k} x{n}" for k, n in counts.items()))
