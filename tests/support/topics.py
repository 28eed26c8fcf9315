"""Topic creation on a real cluster (a started ``cluster.Cluster``), for the end-to-end and the
Spark bridge tests."""
from __future__ import annotations

from cluster import KafkaAdminClient, NewTopic


def create_topic(cluster, name, partitions):
    """Create ``name`` (replication factor 1); once every partition has a leader, return
    {partition: leader}."""
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    image = cluster.wait_for_metadata(
        lambda image: name in image.topics and all(
            state.leader >= 0 for state in image.topics[name].partitions))
    return {state.partition: state.leader for state in image.topics[name].partitions}
