"""``TestCluster``: one ringlog cluster owned by a test suite (the pytest plugin's fixtures
hand these out).

::

    cluster = TestCluster(tmp_path / "ringlog", brokers=3, replication_factor=3).start()
    topic = cluster.new_topic(partitions=3)          # a unique name, created and led
    KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)   # ringlog's clients
    confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap})  # any client
    cluster.close()   # the gateway, then every broker; every shared-memory object unlinked

``kafka_bootstrap`` starts the Kafka wire gateway (``cluster.supervisor.gateway_process``,
ports picked free by the kernel) on first access only, so a test that never reads it pays
nothing. ``broker_logs(lines)`` is the tail of every broker's log (and the gateway's), what
the plugin attaches to a failing test's report.

``close()`` never waits on the test's clients: a producer or consumer the test left open
holds only its own end of a ring, which the brokers' stop does not wait for; brokers that do
not stop within ``stop_timeout`` of SIGTERM are killed. Safe to call twice.

Owner: the thread that made it (the test's).
"""
from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid

from cluster.admin.kafka_admin_client import KafkaAdminClient, NewTopic
from cluster.metadata import data_dir as dd
from cluster.supervisor.cluster import Cluster
from cluster.supervisor.gateway_process import GatewayProcess
from cluster.supervisor.supervisor import RestartBackoff, log_tail

#: Seconds a test cluster's broker or gateway may take to stop after SIGTERM before SIGKILL.
TEST_STOP_TIMEOUT = 5.0
LOG_TAIL_LINES = 40
#: Seconds between two reads of the metadata page while ``new_topic`` waits for leaders.
TOPIC_WAIT_STEP = 0.002
#: Seconds ``new_topic`` watches the page before the admin client's wait takes over.
TOPIC_WAIT = 10.0


def _led(image, name):
    """Whether topic ``name`` is in ``image`` with a leader for every partition."""
    topic = image.topics.get(name)
    return topic is not None and bool(topic.partitions) and all(
        p.leader >= 0 for p in topic.partitions)


TMPFS = "/dev/shm"
"""Where ``tmpfs_data_dir`` makes data directories: Linux's tmpfs for shared memory."""

TMPFS_PREFIX = "rl-data-"
"""Their names' prefix (not ``ringlog``: a leak check for the rings' objects in /dev/shm
would take a data directory for one)."""


def tmpfs_data_dir():
    """A new empty directory of this user's (mode 0700) on the tmpfs ``/dev/shm``, for a
    test cluster's data directory: nothing a broker writes reaches a disk. Its owner removes
    it once the cluster stopped (``TestCluster(..., remove_data_dir=True)``). OSError when
    /dev/shm is missing or not writable."""
    return tempfile.mkdtemp(prefix=TMPFS_PREFIX, dir=TMPFS)


class TestCluster:
    """A started-on-demand Cluster for tests (module doc). ``replication_factor``: the
    cluster's default (``default.replication.factor``, and the internal topics'), at most
    ``brokers``; ``profile``: Cluster's (``"dev"`` by default: no fsync, small segments;
    None for a cluster configured as any other); ``remove_data_dir``: remove the data
    directory once every broker stopped (a directory the caller made for this cluster
    alone, as ``tmpfs_data_dir``'s);
    ``config`` / ``**overrides``: Kafka's broker keys, as Cluster takes them."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self, data_dir, brokers=1, *, replication_factor=None, profile="dev",
                 config=None, stop_timeout=TEST_STOP_TIMEOUT, remove_data_dir=False,
                 **overrides):
        if replication_factor is not None:
            if not isinstance(replication_factor, int) or not 1 <= replication_factor <= brokers:
                raise ValueError(f"replication_factor must be an int from 1 to brokers "
                                 f"({brokers}), found {replication_factor!r}")
            for key in ("default_replication_factor", "offsets_topic_replication_factor",
                        "transaction_state_log_replication_factor"):
                overrides.setdefault(key, replication_factor)
            overrides.setdefault("min_insync_replicas", 1)
        self.replication_factor = replication_factor
        self._remove_data_dir = remove_data_dir
        self._cluster = Cluster(data_dir, brokers, config=config, profile=profile,
                                stop_timeout=stop_timeout, **overrides)
        self._stop_timeout = stop_timeout
        self._gateway = None
        self._gateway_record = None
        self._admin = None
        self._names = itertools.count()
        self._prefix = "t" + uuid.uuid4().hex[:8]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self):
        self._cluster.start()
        return self

    def close(self):
        """Stop the gateway, then every broker; unlink the cluster's shared memory."""
        try:
            if self._admin is not None:
                admin, self._admin = self._admin, None
                admin.close()
        finally:
            try:
                if self._gateway is not None:
                    gateway, self._gateway = self._gateway, None
                    gateway.stop()
            finally:
                self._cluster.stop()
                if self._remove_data_dir:  # only once every broker stopped
                    shutil.rmtree(self._cluster.data_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- addresses --------------------------------------------------------------------------

    @property
    def cluster(self):
        """The underlying Cluster (kill_broker, start_broker, metadata, ...)."""
        return self._cluster

    @property
    def data_dir(self):
        return self._cluster.data_dir

    @property
    def bootstrap_servers(self):
        """``bootstrap_servers`` for ringlog's own clients (the data directory)."""
        return self._cluster.bootstrap_servers

    @property
    def kafka_bootstrap(self):
        """``127.0.0.1:port,...`` of the Kafka wire gateway, started on first access."""
        if self._gateway is None:
            gateway = GatewayProcess(self.data_dir, 0, None, backoff=RestartBackoff(),
                                     start_timeout=self._cluster.start_timeout,
                                     stop_timeout=self._stop_timeout, tail=log_tail)
            try:
                self._gateway_record = gateway.start(0.0, RuntimeError)
            except BaseException:
                gateway.stop()
                raise
            self._gateway = gateway
        return self._gateway_record["bootstrap"]

    # -- topics -----------------------------------------------------------------------------

    def new_topic(self, partitions=1, replication_factor=None, configs=None):
        """Create a topic of a name no other call returns (in any cluster) and return the
        name once every partition has a leader. ``replication_factor``: the cluster's
        default when None.

        The wait watches the metadata page (shared memory, a read every
        ``TOPIC_WAIT_STEP`` s) until every partition is led, then asks the brokers once
        (``describe_topics``); only if they do not know it yet does it fall back to the admin
        client's own wait (``wait_for_topics``, kafka-python's 0.1 s polls)."""
        name = f"{self._prefix}-{next(self._names)}"
        if replication_factor is None:
            replication_factor = self.replication_factor or -1
        if self._admin is None:
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        self._admin.create_topics([NewTopic(name, partitions, replication_factor,
                                            topic_configs=dict(configs or {}))])
        try:
            self._cluster.wait_for_metadata(lambda image: _led(image, name),
                                            timeout=TOPIC_WAIT, step=TOPIC_WAIT_STEP)
        except TimeoutError:
            pass  # the admin client's wait below says what is missing
        self._admin.wait_for_topics([name])
        return name

    # -- diagnostics ------------------------------------------------------------------------

    def broker_logs(self, lines=LOG_TAIL_LINES):
        """The last ``lines`` lines of each broker's log and of the gateway's, as one text."""
        parts = []
        for broker_id in self._cluster.broker_ids:
            path = os.path.join(dd.broker_dir(self.data_dir, broker_id), dd.BROKER_LOG)
            parts.append(f"--- broker {broker_id} ({path}) ---\n{log_tail(path, lines)}")
        gateway_log = os.path.join(self.data_dir, dd.GATEWAY_LOG)
        if os.path.exists(gateway_log):
            parts.append(f"--- gateway ({gateway_log}) ---\n{log_tail(gateway_log, lines)}")
        return "\n".join(parts)

    def __repr__(self):
        return f"TestCluster({self._cluster!r})"
