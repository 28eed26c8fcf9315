"""What several test folders share and that is not a fixture: the wait bounds (bounds), the
fake clock (clock), the fork context (processes), the repository's paths (paths), the
thread-served fake brokers (fake_broker), real broker processes and a protocol client
(broker, with the broker_runner script), the tools' runner (tools) and topic creation on a
real cluster (topics), zip-bomb batches (zip_bomb). Fixtures live in the conftest.py files."""
