"""Tests of the client floor (observatory/client/): the lean SSE reader, timed passes and batches, the request
deadline and error kinds, requests cut on purpose, and answers out of range stored as malformed.

The servers are the hand-made stubs of tests/support/ (sse_stub.py, stub_server.py): a real engine cannot split a
body at a chosen byte or answer a count of 1e30 on demand.
"""
