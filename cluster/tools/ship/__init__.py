"""``ringlog ship``: tail log files into a topic, at least once, across crashes and rotation
(what Filebeat, Fluent Bit and Vector do for Kafka users).

The room, bottom up:

- ``files``: the file system the shipper reads (``OsFiles``; tests use a fake one), file
  identity (device, inode and a fingerprint of the first bytes) and ``FileStat``.
- ``lines``: cutting read bytes into lines with their byte positions, ``--max-line-bytes``.
- ``checkpoint``: the checkpoint file {file identity -> byte position}, written atomically.
- ``tailer``: which files to read, in which order, from where: discovery by glob, rotation
  (rename, copytruncate, delete), the reading of one chunk of lines.
- ``records``: a line -> (key, value, headers): the key template, ``--parse json``.
- ``shipper``: the loop: read while the bounded buffer has room, send, track
  acknowledgements per file, checkpoint what is acknowledged, stats and progress.
- ``command``: the command line (``ringlog ship``).

Vocabulary: a *position* is a byte of a file (the checkpoint keeps positions, the
``log.offset`` header carries one); an *offset* is a record's number in a partition.
"""
