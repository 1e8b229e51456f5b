"""Tests of triage (observatory/triage/): its plan, delta debugging and knob-conditional faults as pure
functions, and `observatory triage` end to end with a fake at the launcher boundary only. Triage against the
real engine is real_engine/test_triage_engine.py.
"""
