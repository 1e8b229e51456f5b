"""Timed batches: N timed requests, CONCURRENCY in flight, with the set-up before the clock.

`ArmRun.throughput` used to time a batch from before it created its pool of
CONCURRENCY threads: at 64 streams x 100 tok/s on a pacing stub the clock
then also counted starting the 64 threads (up to 100 ms on the 2-core
machine) and opening each thread's connection, 3-6% of a default-suite batch
(issue "A fast instrument", benchmarks/README.md). Here every worker thread
is started, and one keep-alive connection per worker opened (or taken from
the client's pool), before the clock starts; then the requests go out, each
worker taking the next when its last one ends.

Tried and measured, not kept: one thread reading every socket through a
select loop (the same parsing as `EngineClient.run_timed`) used half the
client CPU of the threads but received 3-9% less at 64 streams whenever the
shared machine was loaded (load average 5-8): a single thread gets one
scheduler share, and every stream waits while it is descheduled. An asyncio
loop doubled the CPU per chunk.

The batch's wall time, the throughput figure's denominator, runs from just
before the first request is sent to just after the last response is read:
`vllm bench serve`'s benchmark duration (ramp-up and tail included). Each
request is `EngineClient.run_timed`: the same body, parsing, deadline and
error kinds.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from observatory.client.answer import Response
from observatory.client.send import EngineClient
from observatory.client.wire import DeadlineExceeded, WireError
from observatory.model.probes import Probe

_WARM_S = 30.0  # how long the workers wait for one another to start (a bound, not an expected time)


def timed_batch(client: EngineClient, work: list[Probe], concurrency: int) -> tuple[list[Response], float]:
    """Send every probe of WORK as a timed pass, CONCURRENCY at a time: (responses in WORK's order, wall seconds).

    Never raises for a request's failure: it is that request's Response, as
    with `EngineClient.run_timed`. The connections stay in the client's
    keep-alive pool for the next batch.
    """
    n = min(max(1, concurrency), len(work))
    if n == 0:
        return [], 0.0
    if n == 1:  # one at a time: this thread sends them (a pool of one cost 0.5-1 ms of CPU a request)
        _warm(client, threading.Barrier(1))
        t0 = time.perf_counter()
        resps = [client.run_timed(p) for p in work]
        return resps, time.perf_counter() - t0
    with ThreadPoolExecutor(max_workers=n) as ex:
        ready = threading.Barrier(n)
        list(ex.map(lambda _: _warm(client, ready), range(n)))
        t0 = time.perf_counter()
        resps = list(ex.map(client.run_timed, work))
        wall = time.perf_counter() - t0
    return resps, wall


def _warm(client: EngineClient, ready: threading.Barrier) -> None:
    """In one worker thread: hold a keep-alive connection until every worker has started, then pool it.

    The barrier makes the executor start all its threads (none is idle while
    the others wait), and holding the connection makes each worker's one
    distinct. A connection that cannot be opened is left to the request,
    which stores why.
    """
    pool = client._wire
    conn = pool.take_idle()
    if conn is None:
        try:
            conn = pool.connect(time.perf_counter() + min(client.timeout, 10.0))
        except (WireError, DeadlineExceeded):
            conn = None
    try:
        ready.wait(_WARM_S)
    except threading.BrokenBarrierError:
        pass
    finally:
        if conn is not None:
            pool.release(conn, True)
