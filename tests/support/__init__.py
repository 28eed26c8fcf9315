"""What several test folders share and that is not a fixture (fixtures live in the
conftest.py files):

- waiting: the one ``wait_for`` (waits), its bounds (bounds), the fake clock (clock) for
  what need not wait at all;
- brokers: real broker processes, a protocol client and ``BrokerEnv``, one broker with its
  metadata page (broker, with the broker_runner script); ``HandlerEnv``, a broker's request
  handler over real logs in the test process, with its fake connection and AlterPartition
  channel (handlers); three brokers of one data directory (trio); the thread-served fake
  brokers of the client tests (fake_broker); another broker's end of an inter-broker
  channel (fake_connection); a fake group coordinator (fake_coordinator);
- requests and records: group and transaction requests (groups, transactions), topic
  creation on a real cluster (topics), stats snapshots made by hand (snapshots), zip-bomb
  batches (zip_bomb), disk faults (disk_faults);
- the rest: the fork context (processes), the repository's paths (paths), the tools' runner
  (tools), the property tests' example counts (properties).
"""
