"""The one JSON serialisation of session data (`show --json`, `gate --json`): standard JSON only.

Read-model objects (`observatory.model.read_model`) are written through its
`to_plain`, so the JSON has the documented shape of those classes.

Python's json writes NaN and Infinity, which no strict parser (jq, JSON.parse,
Go, Rust) accepts (issue 19 item 9). A non-finite float means "not
measurable" and is written as null; `allow_nan=False` then guarantees that
nothing non-standard slips through.
"""

from __future__ import annotations

import json
import math
from typing import Any

from observatory.model.read_model import to_plain


def finite(value: Any) -> Any:
    """VALUE with every non-finite float (NaN, +-Inf) replaced by None, in nested dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(data: Any) -> str:
    """DATA (read-model objects or plain data) as standard JSON text (non-finite numbers as null; other
    objects as their str)."""
    return json.dumps(finite(to_plain(data)), ensure_ascii=False, default=str, allow_nan=False)
