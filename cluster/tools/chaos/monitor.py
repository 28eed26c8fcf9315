"""Leadership as the metadata page shows it, sampled while ``ringlog chaos`` runs.

``LeadershipMonitor.run(stop)`` (a thread of the command) reads the page every
``interval`` seconds and writes a line to its log whenever one of the topic's partitions
changes leader, epoch, ISR or ELR: ``{"t", "partition", "leader", "epoch", "isr", "elr"}``
(leader -1: offline; ``elr``: KIP-966's eligible leader replicas, which may lead
cleanly). The checker turns the lines into unavailability windows and unclean elections.
Owner: its thread.
"""
from __future__ import annotations

import json
import time

#: Seconds between two reads of the metadata page.
INTERVAL = 0.02


class LeadershipMonitor:
    """Writes the topic's leadership changes to ``path`` (see the module doc)."""

    def __init__(self, metadata, topic, path, interval=INTERVAL):
        self.metadata = metadata
        self.topic = topic
        self.path = path
        self.interval = interval

    def run(self, stop):
        seen = {}
        with open(self.path, "a", buffering=1, encoding="utf-8") as out:
            while True:
                self.sample(seen, out)
                if stop.wait(self.interval):
                    self.sample(seen, out)
                    return

    def sample(self, seen, out):
        """Write the partitions that changed since ``seen`` (updated in place)."""
        try:
            info = self.metadata().topics.get(self.topic)
        except (OSError, ValueError, TimeoutError):
            return  # the page is being rewritten or gone: the next sample sees it
        if info is None:
            return
        now = time.time()
        for state in info.partitions:
            current = (state.leader, state.leader_epoch, list(state.isr), list(state.elr))
            if seen.get(state.partition) != current:
                seen[state.partition] = current
                out.write(json.dumps({"t": now, "partition": state.partition,
                                      "leader": state.leader, "epoch": state.leader_epoch,
                                      "isr": list(state.isr),
                                      "elr": list(state.elr)}) + "\n")
