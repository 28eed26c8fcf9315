"""Broker configuration profiles: named sets of Kafka broker keys a cluster starts with
unless its own configuration sets the key (``Cluster(..., profile="dev")``, ``ringlog
cluster start --dev``).

``dev``, as Redpanda's developer mode: for test suites and laptops only, UNSAFE for
anything else. No fsync at all (``ringlog.fsync=false``: a machine's crash may lose
acknowledged records); small segment files (1 MiB; the internal topics' too) so a test's
data directory stays small and rolls happen in tests; consumer groups form at once (no
initial rebalance delay); group session timeouts down to 1 s accepted.
"""
from __future__ import annotations

MIB = 1024 * 1024

PROFILES = {
    "dev": {
        "log.segment.bytes": MIB,
        "offsets.topic.segment.bytes": MIB,
        "transaction.state.log.segment.bytes": MIB,
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 1000,
        "ringlog.fsync": False,
    },
}


def apply_profile(profile, config):
    """``config`` (Kafka's keys -> values) over the profile's values; ValueError naming an
    unknown profile. ``None`` is no profile."""
    if profile is None:
        return dict(config)
    if profile not in PROFILES:
        raise ValueError(f"unknown cluster profile {profile!r}; known: "
                         f"{', '.join(sorted(PROFILES))}")
    return {**PROFILES[profile], **config}
