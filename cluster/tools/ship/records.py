"""A line -> a record: its key from the key template, its headers, ``--parse json``.

Key template fields (``--key``, Python format syntax; ``""`` sends no key):

- ``{host}``: this machine's host name, or the line's JSON field ``host`` with ``--parse json``;
- ``{service}``: the line's JSON field ``service`` with ``--parse json``, else the named
  group ``service`` of ``--service-pattern`` (a regular expression searched in the path),
  else the file's name up to its first dot (``/var/log/api.log.1`` -> ``api``);
- ``{file}``: the path where the file was first seen (a renamed file keeps the key of its
  lines, so a source keeps its partition and its order).

Headers, as Filebeat's fields: ``log.file.path`` (where first seen), ``log.file.id``
(``files.file_id``), ``log.offset`` (the line's first byte in the file, decimal); a JSON
line that does not parse also carries ``error.message`` (and is counted).

``--parse json``: each line is parsed as a JSON object; it is shipped as it is (every field
kept, byte for byte); a line that is not a JSON object is shipped raw, never dropped.

Owner: the shipper's thread.
"""
from __future__ import annotations

import json
import os
import re
import socket
import string

FIELDS = ("host", "service", "file")
#: Header names (Filebeat's ECS field names).
PATH_HEADER = "log.file.path"
ID_HEADER = "log.file.id"
OFFSET_HEADER = "log.offset"
ERROR_HEADER = "error.message"


class KeyTemplate:
    """``--key``: which fields it uses, and how to fill it (module doc)."""

    def __init__(self, template, service_pattern=None, host=None):
        self.template = template
        self.fields = set()
        for _, name, spec, conversion in string.Formatter().parse(template):
            if name is None:
                continue
            if name not in FIELDS or spec or conversion:
                raise ValueError(f"--key {template!r}: unknown field {{{name}}}; the fields "
                                 "are " + ", ".join(f"{{{f}}}" for f in FIELDS))
            self.fields.add(name)
        try:
            self.service_pattern = (None if service_pattern is None
                                    else re.compile(service_pattern))
        except re.error as exc:
            raise ValueError(f"--service-pattern {service_pattern!r}: {exc}") from None
        if self.service_pattern is not None and "service" not in self.service_pattern.groupindex:
            raise ValueError(f"--service-pattern {service_pattern!r} has no group named "
                             f"'service' ((?P<service>...))")
        self.host = host if host is not None else socket.gethostname()

    @property
    def per_line(self):
        """Whether the key can change from line to line (a JSON field fills it)."""
        return bool(self.fields & {"host", "service"})

    def service_of(self, path):
        if self.service_pattern is not None:
            match = self.service_pattern.search(path)
            if match is not None and match.group("service"):
                return match.group("service")
        return os.path.basename(path).split(".", 1)[0]

    def file_key(self, origin):
        """The key of a file's lines when no JSON field overrides it (None: no key)."""
        if not self.template:
            return None
        return self.template.format(host=self.host, service=self.service_of(origin),
                                    file=origin).encode()

    def line_key(self, origin, fields):
        """The key of a JSON line: ``fields`` (the parsed object) may fill host/service."""
        host = fields.get("host")
        service = fields.get("service")
        return self.template.format(
            host=host if isinstance(host, str) else self.host,
            service=service if isinstance(service, str) else self.service_of(origin),
            file=origin).encode()


def parse_json(line):
    """The object of a JSON line, or the reason it is not one (a str)."""
    try:
        value = json.loads(line)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(value, dict):
        return f"not a JSON object but a {type(value).__name__}"
    return value
