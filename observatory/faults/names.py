"""The names in one of the plugin's variables (``OBSERVATORY_FAULT``, ``OBSERVATORY_REPAIR``): one parser for both."""

from __future__ import annotations

# Values that mean "none" (so a shell can switch the variable off in place).
_OFF = frozenset({"", "none", "off", "0", "false", "no"})


def split_names(value: str | None) -> frozenset[str]:
    """The names in one of the plugin's variables (faults, repairs): comma- or whitespace-separated,
    any case, ``-`` for ``_``; unset, empty or one of ``none/off/0/false/no``: none."""
    if value is None or value.strip().lower() in _OFF:
        return frozenset()
    return frozenset(n.strip().lower().replace("-", "_") for n in value.replace(",", " ").split())
