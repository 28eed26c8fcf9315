"""kio imports an API's schema modules at its first use (5-15 ms each). A client loads the
codecs of the requests it sends while records flow before they flow, so none of its
requests then waits for an import (consumer_proc/fetcher.py for Fetch, the sender for
Produce; here: a group member's OffsetCommit and Heartbeat once it is stable, a
transactional producer's AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn in
``init_transactions``). Each case runs in a fresh interpreter, whose codecs are its own."""
from __future__ import annotations

import subprocess
import sys

import pytest

#: A fresh interpreter starts a fake cluster in argv[1] and a client of it (argv[2]: "group"
#: or "transactional"), brings it to where records flow, and prints the codecs of
#: argv[3:] (API names) it has not loaded.
SCRIPT = """
import sys, time
from cluster.client.kafka_client import API_VERSIONS
from cluster.protocol import frames
from cluster.protocol.frames import ApiKey
from tests.support.fake_broker import FakeCluster

cluster = FakeCluster(sys.argv[1], 1)
try:
    cluster.create_topic("t", 1)
    if sys.argv[2] == "group":
        from cluster import KafkaConsumer
        client = KafkaConsumer("t", bootstrap_servers=cluster.data_dir, group_id="g",
                               heartbeat_interval_ms=30000, enable_auto_commit=False)
        deadline = time.monotonic() + 60
        while not client.assignment():
            assert time.monotonic() < deadline, "no assignment"
            client.poll(timeout_ms=50)
    else:
        from cluster import KafkaProducer
        client = KafkaProducer(bootstrap_servers=cluster.data_dir, transactional_id="x")
        client.init_transactions()
    missing = [f"{kind} {name}" for name in sys.argv[3:] for kind in ("request", "response")
               if (kind, ApiKey[name], API_VERSIONS[ApiKey[name]]) not in frames._CODECS]
    client.close()
finally:
    assert cluster.close() == []
print(missing)
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("client, apis", [
    ("group", ["OFFSET_COMMIT", "HEARTBEAT"]),
    ("transactional", ["ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN", "TXN_OFFSET_COMMIT",
                       "END_TXN"]),
])
def test_a_client_loads_the_codecs_of_what_it_sends_with_records_flowing_before(
        tmp_path, client, apis):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data"), client, *apis],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"
