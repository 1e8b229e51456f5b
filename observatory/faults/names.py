"""The plugin's variables: the names in ``OBSERVATORY_FAULT`` and ``OBSERVATORY_REPAIR`` (one parser for both), and the
numeric knobs of single faults (``fraction_var``)."""

from __future__ import annotations

import os

# Values that mean "none" (so a shell can switch the variable off in place).
_OFF = frozenset({"", "none", "off", "0", "false", "no"})


def split_names(value: str | None) -> frozenset[str]:
    """The names in one of the plugin's variables (faults, repairs): comma- or whitespace-separated,
    any case, ``-`` for ``_``; unset, empty or one of ``none/off/0/false/no``: none."""
    if value is None or value.strip().lower() in _OFF:
        return frozenset()
    return frozenset(n.strip().lower().replace("-", "_") for n in value.replace(",", " ").split())


def fraction_var(name: str, default: float, upper: float, what: str, environ: dict[str, str] | None = None) -> float:
    """A fault's numeric knob NAME in (0, UPPER] (DEFAULT when unset or blank); a bad value stops the engine with
    a message saying it is WHAT (a fault never injected would make the negative control pass silently)."""
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= upper:
        raise ValueError(f"{name}={raw!r}: a number in (0, {upper:g}], {what}")
    return value
