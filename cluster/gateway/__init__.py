"""The Kafka wire gateway: real Kafka clients reach a ringlog cluster over loopback TCP.

``server`` (listeners, lifecycle, record), ``bridge`` (one client connection and its ring
connection), ``wire`` (the few fields read or rewritten in the frames), ``config``
(Kafka-named settings), ``stats`` (the stats page's figures). ``ringlog gateway`` and
``ringlog cluster start --kafka-port`` run it (``cluster.tools.gateway_cmd``).
"""
