"""This broker's view of the published metadata: the newest image, and when it moved.

The source is the cluster's metadata page (``cluster.metadata.page.MetadataPage``) or
anything with its two readers: ``version`` (cheap: one load, compared every loop
iteration) and ``read()`` (the image, parsed only when the version moved). Tests hand in
a fake.

Owner: the broker's loop thread.
"""
from __future__ import annotations

from cluster.metadata.model import MetadataImage


class BrokerMetadata:
    """The newest MetadataImage of ``source`` as of the last ``refresh()``. ``namespace``:
    the cluster's shared-memory namespace (``shm_ring.naming``; the bare cluster id if not
    given), which this broker's own connections to other brokers use."""

    def __init__(self, source, cluster_id, namespace=None):
        self.source = source
        self.image = MetadataImage.empty(cluster_id)
        self.namespace = cluster_id if namespace is None else namespace
        self._seen = None

    def refresh(self):
        """The new image if the source's version moved since the last call, else None."""
        version = self.source.version
        if version == self._seen:
            return None
        self._seen = version
        image = self.source.read()
        if image is self.image:
            return None
        self.image = image
        return image
