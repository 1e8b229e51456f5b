"""Tests of the field channels (observatory/channels/), without an engine: each channel's plan, its judge on
synthetic stored sessions (tests/support/state_channels.py, semantics_store.py, channel_rows.py) and its fault's
decision; the framework from plan to report through `gate` against stub servers. The same channels on the real
engine are real_engine/test_engine_channels_*.py.
"""
