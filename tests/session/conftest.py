"""Tests of the session floor (observatory/session/): the plan (profiles, A/A copies, parsers, the deployed
depth), the one launch path, the preflight of URL arms, measuring an arm (its engine restarted under a channel,
the non-streamed reference), `--resume`, selftest's fault plan.

And whole sessions from outside, through the CLI, against the STUB servers of tests/support/stub_server.py:
servers that hang, send malformed bodies, drip, lie or answer out of range, storage that fails mid-session, hostile
files. Each case ends in a verdict and an exit code, never a traceback. No engine is launched.
"""
