"""The broker's heartbeat thread: proof to the controller that the process still runs.

Every ``broker.heartbeat.interval.ms`` the thread writes the monotonic time into the
broker's ``broker.heartbeat`` file (``BrokerRegistration.beat``: one pwrite into the page
cache, no fsync); the controller fences a broker whose heartbeat is older than
``broker.session.timeout.ms`` (not alive in the image: its leaderships move and it leaves
the ISRs) until the heartbeats resume. A SIGKILLed broker is noticed at once through its
flock; the heartbeat catches a process that exists but does not run (SIGSTOP, a hung
host).

Why a file and not a BrokerHeartbeat request (Kafka's) or a word in shared memory: a
pwrite every interval is the cheapest write there is, needs no connection to the
controller (which may move or be down) and no new shared-memory object to name, clean up
after a SIGKILL and map again after a restart; the controller reads it with one pread per
broker and poll through a descriptor that stays valid across restarts
(``cluster.metadata.broker_lock``).

Why a thread, as Kafka's BrokerLifecycleManager: the request loop may be busy for a while
(a large fetch, recovering logs, a burst of requests on a 2-core machine), and a busy
broker is a healthy one; the thread needs the GIL only for microseconds per beat, and
CPython hands it over at least every 5 ms (``sys.getswitchinterval``), so a busy loop
does not starve it.

Defaults, for brokers sharing one host (Kafka's are 2000 / 9000 ms for brokers on separate
machines, heartbeating over a network to a controller quorum):

- ``broker.heartbeat.interval.ms`` = 500: a beat costs one syscall, so beat often; the
  controller then sees a beat at most half a second old from a healthy broker.
- ``broker.session.timeout.ms`` = 6000: twelve missed beats. A stopped broker is fenced
  (and its partitions led elsewhere) within 6 s plus one controller poll; a healthy one
  would need its heartbeat thread not to run for 6 s to be fenced, which a garbage
  collection pause of CPython (milliseconds to a few hundred for large heaps) or a
  2-core machine shared by many busy processes (a runnable thread waits for a CPU for
  tens of milliseconds, rarely a second) does not reach. Tests that SIGSTOP brokers set
  it lower.

Owner: the broker's main thread starts and closes it; the thread only writes the file.
"""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class HeartbeatThread:
    """Beats for ``registration`` (a ``BrokerRegistration``) every ``interval`` seconds;
    ``clock`` gives monotonic nanoseconds. ``start()`` beats once before it returns, so the
    heartbeat is fresh before the broker says it serves; ``close()`` stops the thread and is
    safe to call twice."""

    def __init__(self, registration, interval, clock=time.monotonic_ns):
        self._registration = registration
        self._interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._registration.beat(self._clock())
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{self._registration.broker_id}", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self._interval):
            try:
                self._registration.beat(self._clock())
            except OSError as exc:  # a full or vanished disk: keep trying, say why
                log.warning("broker %d cannot write its heartbeat: %s",
                            self._registration.broker_id, exc)

    def close(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
