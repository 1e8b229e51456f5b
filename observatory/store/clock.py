"""The store's clock: timestamps as stored (naive UTC, portable across SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """Timezone-aware UTC now (stored as naive UTC for portability)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
