"""What tests of several floors share: stub servers, synthetic stored sessions, paths, verdict readers.

Nothing here is collected as a test. A test imports it by its full name (``from tests.support.stub_server import
StubServer``); fixtures stay in the conftest.py files.
"""
