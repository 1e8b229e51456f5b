"""Signal dispositions for the observatory processes tests start and then signal like a user would."""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """`preexec_fn` for a child that a test Ctrl-C's: SIGINT back to its default.

    A shell's background job (pytest started with `&`, as CI runners and our own tools do) has SIGINT
    ignored; a child inherits that, Python then installs no KeyboardInterrupt handler, and the SIGINT
    the test sends is dropped: the child runs on as if nothing was sent (seen as a 120-s hang in
    `EngineServer.wait_ready` in tests/real_engine/test_docker_engine.py's ctrl-c case, 2026-12-03).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
