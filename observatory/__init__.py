"""observatory: a correctness-and-regression observatory for speculative decoding.

Drives a live serving stack arm by arm (base, mtp1, mtp2, ...) in one
session, diffs greedy token sequences spec vs non-spec, judges every output
with gates, measures acceptance and speed, stores everything in SQLite and
renders reports.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
