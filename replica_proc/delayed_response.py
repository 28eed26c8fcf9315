"""A request answered through a callback, now or later: the group coordinator's JoinGroup,
SyncGroup, OffsetCommit, DeleteGroups and OffsetDelete (its ``respond``).

``DelayedResponse(channel)`` parks itself on the channel (muting it: responses leave in
request order, see ``channel``) before the coordinator is called; ``send(frame)`` answers
and unmutes — at once if the coordinator answers during the call, else whenever it does
(a rebalance completing, a write replicated, a timer). ``cancel()`` (the client went away,
``RequestHandler.cancel``) makes a later ``send`` a no-op: the coordinator still answers
exactly once, into nothing.

Owner: the broker's loop thread.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class DelayedResponse:
    """One parked group request of ``channel`` (see the module doc)."""

    __slots__ = ("channel", "cancelled")

    def __init__(self, channel):
        self.channel = channel
        self.cancelled = False
        channel.parked = self

    def __repr__(self):
        return f"DelayedResponse({self.channel.name!r}, cancelled={self.cancelled})"

    def send(self, encode):
        """Answer with the frame ``encode()`` returns and unmute the channel. A failure to
        encode marks the channel for closing (as a failed delayed produce's answer does)."""
        if self.cancelled:
            return
        self.cancelled = True  # answered once
        channel = self.channel
        if channel.parked is self:
            channel.parked = None
        try:
            channel.send(encode())
        except Exception as exc:
            log.exception("%s: answering a group request failed", channel.name)
            channel.closing = f"answering a group request failed: {exc!r}"

    def cancel(self):
        self.cancelled = True
