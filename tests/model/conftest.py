"""Tests of the model floor (observatory/model/): the nouns every phase shares.

Arms and probe files read strictly, suites imported from request logs and datasets, their JSON Schemas, the read
model and `show --json` against its committed schema, plugins by entry point, the served dtype's numerics bounds,
secrets masked wherever they could surface, and every parser of untrusted input under property-based tests.
No engine is launched (the plugin's real session is real_engine/test_plugin_session.py).
"""
