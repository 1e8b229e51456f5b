"""Tests of the store floor (observatory/store/): named migrations, packed and compressed columns, the same
results on SQLite and on a real PostgreSQL server (the root conftest's `pg_url`), a default session's size,
and the lease a running session holds. No engine is launched.
"""
