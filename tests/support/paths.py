"""Where the tests find the repository, their fixtures and the committed examples."""

from __future__ import annotations

import gzip
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
EXAMPLES = REPO / "examples"


def example_db(rel: str, dest: Path) -> Path:
    """The committed example database REL (under examples/, stored gzipped to keep the tree small
    enough to travel to the GPU device with its bundle), unpacked to DEST."""
    dest.write_bytes(gzip.decompress((EXAMPLES / f"{rel}.gz").read_bytes()))
    return dest
