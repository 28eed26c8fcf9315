"""The brokers ``ringlog chaos`` may hurt: signalled by the pids it knows, restarted by
their supervisor.

Two kinds, one interface (``pids``, ``kill``, ``terminate``, ``start``, ``pause``,
``resume``, ``heal``):

- ``OwnedBrokers``: a ``Cluster`` the tool started; its embedded supervisor kills, reaps and
  starts the brokers.
- ``SupervisedBrokers``: a cluster that was already running under a watching supervisor
  (``ringlog cluster start``); ``broker_control`` stops, kills and starts its brokers by the
  pid in ``D/broker-<id>/broker.json`` while the broker holds its lock.

A signal only ever goes to a pid one of those names as a broker of the data directory,
and every pid the tool SIGSTOPs is remembered until it SIGCONTs it: ``heal()`` continues
every paused broker and starts every broker that is down, so a run ends (or is
interrupted) with the cluster whole. Owner: the thread running the fault injector, then
the command's main thread after the injector has stopped.
"""
from __future__ import annotations

import abc
import os
import signal
import time

from cluster.errors import BrokerNotAvailableError
from cluster.supervisor import broker_control
from cluster.supervisor.supervisor import STOP_TIMEOUT, running_brokers

_WAIT_STEP = 0.02


class Brokers(abc.ABC):
    """The interface both kinds offer (module doc); pausing, resuming and healing are
    shared, by pid."""

    def __init__(self, broker_ids):
        self.broker_ids = sorted(broker_ids)
        self._paused = {}  # broker id -> pid it was SIGSTOPped as

    @abc.abstractmethod
    def pids(self):
        """{broker id: pid} of the brokers running now."""

    @abc.abstractmethod
    def kill(self, broker_id):
        """SIGKILL the broker and wait until it is gone; its pid, None if it was down."""

    @abc.abstractmethod
    def terminate(self, broker_id, timeout=STOP_TIMEOUT):
        """SIGTERM the broker and wait until it is gone; its pid, None if it was down."""

    @abc.abstractmethod
    def start(self, broker_id):
        """Start the broker and wait until it serves; its pid."""

    def pid(self, broker_id):
        """The pid broker ``broker_id`` runs as, or None when it is down."""
        return self.pids().get(broker_id)

    def pause(self, broker_id):
        """SIGSTOP the broker; its pid, or None when it was not running."""
        pid = self.pid(broker_id)
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self._paused[broker_id] = pid
        return pid

    def resume(self, broker_id):
        """SIGCONT the broker if this tool paused it; its pid or None."""
        pid = self._paused.pop(broker_id, None)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                return None
        return pid

    def paused(self):
        return sorted(self._paused)

    def resume_all(self):
        """SIGCONT every broker this tool paused."""
        for broker_id in list(self._paused):
            self.resume(broker_id)

    def heal(self):
        """SIGCONT every paused broker, start every broker that is down; the ids started."""
        self.resume_all()
        down = [b for b in self.broker_ids if self.pid(b) is None]
        for broker_id in down:
            self.start(broker_id)
        return down

    def _forget(self, broker_id):
        """A killed broker cannot stay paused: its SIGSTOP died with it."""
        self._paused.pop(broker_id, None)


class OwnedBrokers(Brokers):
    """The brokers of a ``Cluster`` this tool started (see the module doc)."""

    def __init__(self, cluster):
        super().__init__(cluster.broker_ids)
        self.cluster = cluster

    def pids(self):
        return self.cluster.pids()

    def kill(self, broker_id):
        pid = self.pid(broker_id)
        if pid is None:
            return None
        self._forget(broker_id)
        self.cluster.kill_broker(broker_id)
        return pid

    def terminate(self, broker_id, timeout=STOP_TIMEOUT):
        """SIGTERM (a controlled shutdown), wait until it is gone (SIGKILL after
        ``timeout``); its pid or None."""
        pid = self.pid(broker_id)
        if pid is None:
            return None
        self.resume(broker_id)  # a stopped process cannot shut down
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not broker_control.gone(pid):
            if time.monotonic() >= deadline:
                self.cluster.kill_broker(broker_id)
                break
            time.sleep(_WAIT_STEP)
        return pid

    def start(self, broker_id):
        self.cluster.start_broker(broker_id)
        return self.pid(broker_id)


class SupervisedBrokers(Brokers):
    """The brokers of a cluster a watching supervisor runs (see the module doc)."""

    def __init__(self, data_dir, broker_ids):
        super().__init__(broker_ids)
        self.data_dir = data_dir

    def pids(self):
        return {b: pid for b, pid in running_brokers(self.data_dir).items()
                if isinstance(pid, int) and pid > 0}

    def kill(self, broker_id):
        self._forget(broker_id)
        try:
            return broker_control.kill_broker(self.data_dir, broker_id)
        except BrokerNotAvailableError:
            return None  # down already

    def terminate(self, broker_id, timeout=STOP_TIMEOUT):
        self.resume(broker_id)
        try:
            return broker_control.stop_broker(self.data_dir, broker_id, timeout)
        except BrokerNotAvailableError:
            return None

    def start(self, broker_id):
        return broker_control.start_broker(self.data_dir, broker_id)
