"""The broker tests (replica_proc): each file keeps its own broker fixtures (a broker process
per test or per module, a ReplicaManager on a fake clock); the broker processes, protocol
client and images they share are in tests/support/broker.py."""
