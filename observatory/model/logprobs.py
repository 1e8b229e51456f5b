"""A logprob an answer gave, checked at the edge: shared by the answer reader (`observatory.client.answer`)
and the engine dialects that fill an answer their own way (`observatory.engines`)."""

from __future__ import annotations

from typing import Any, Protocol


class HasBadFields(Protocol):
    """An answer being read: the out-of-range fields it carried are named here (the answer is then malformed)."""

    bad_fields: list[str]


def shown(value: Any) -> str:
    """VALUE as named in an error: bounded (a server may send megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def checked_logprob(out: HasBadFields, value: Any) -> float | None:
    """VALUE as a logprob: a number <= 0 (-inf allowed: probability zero); else None, named in OUT.bad_fields."""
    if type(value) in (int, float) and value <= 0:  # NaN and +inf fail the comparison or the bound
        return float(value)
    if len(out.bad_fields) < 8:
        out.bad_fields.append(f"logprob {shown(value)} is not a log-probability (a number <= 0)")
    return None
