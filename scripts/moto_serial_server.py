"""moto's S3 server, answering one request at a time.

moto checks a conditional write's precondition (`If-None-Match: *`,
`If-Match`) and then writes, with nothing between the two that stops a
second request, and its server runs each request on a thread of its own:
two concurrent `If-None-Match: *` PUTs of one key can both succeed. The
conformance suite saw it under the test command's load (two winners of
one free key, `concurrent_try_acquire_has_one_winner`). Amazon S3 applies
each conditional write atomically; serializing the requests gives the
emulator that property. Reads run under the lock too: moto computes an
object's ETag lazily from a buffer it shares with readers, without its
own lock, so a read beside the write could make a wrong ETag (not seen,
but cheap to rule out; moto is bound to one core by Python's lock anyway).
Connections are still accepted on threads, so an idle keep-alive
connection does not block the others; only the application runs under
one lock.

Seen: 10 of 300 rounds of 16 concurrent `If-None-Match: *` PUTs of a
fresh key had two winners against plain moto under CPU load, 0 of 300
through this server (tests/s3.rs `the_emulator_applies_conditional_writes_one_at_a_time`
checks it on every run).

Started by scripts/moto.sh with moto's own virtualenv's Python:
    python moto_serial_server.py HOST PORT
"""

import os
import signal
import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


class FairLock:
    """A lock taken in the order it was asked for: Python's own lock is
    not fair, and under a burst of writes a renewal could wait behind
    requests that came after it for seconds (a live holder's lease lost
    in the tests)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._next = 0
        self._serving = 0

    def __enter__(self):
        with self._cond:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._cond.wait()

    def __exit__(self, *exc):
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


def serial(app):
    lock = FairLock()

    def call(environ, start_response):
        with lock:
            # The whole answer is made under the lock: moto's bodies are
            # built in memory, so the iterable is read here too.
            return list(app(environ, start_response))

    return call


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        host,
        port,
        serial(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
