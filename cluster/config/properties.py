"""Java properties files and ``--override key=value`` pairs, read as Kafka reads them.

``parse_properties`` follows ``java.util.Properties.load``:

- lines end at ``\\n``, ``\\r`` or ``\\r\\n``; leading spaces, tabs and form feeds are skipped;
- a line whose first other character is ``#`` or ``!`` is a comment (never continued);
- a line ending in an odd number of backslashes continues on the next line, whose leading
  whitespace is dropped (an empty continuation line ends it; so does the end of the text);
- the key runs to the first unescaped ``=``, ``:``, space, tab or form feed; whitespace, at
  most one ``=`` or ``:``, and whitespace again separate it from the value, which keeps its
  trailing whitespace; a line with a key only has the value ``""``;
- in keys and values ``\\t \\n \\r \\f`` and ``\\uXXXX`` are escapes, and a backslash
  before any other character stands for that character (``\\=``, ``\\:``, ``\\ ``,
  ``\\\\``);
- a key given twice keeps its last value.

One difference: ``load_properties`` decodes the file as UTF-8, where Java's
``Properties.load(InputStream)`` (what Kafka's ``Utils.loadProps`` calls) uses ISO-8859-1.
Both read ASCII files and ``\\uXXXX`` escapes alike.

``parse_overrides`` follows Kafka's ``CommandLineUtils.parseKeyValueArgs``, which
``kafka-server-start.sh server.properties --override key=value`` uses: split at the first
``=``; a pair without ``=`` or with nothing after it has the value ``""``.

Pure functions: any thread may call them.
"""
from __future__ import annotations

import re

from cluster.errors import InvalidConfigurationError

_WHITESPACE = " \t\f"
_LINE_END = re.compile(r"\r\n|\r|\n")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(u.{0,4})|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text, source="<properties>"):
    """Key -> value (both strings) for the properties in ``text``.

    ``source`` names the text in errors (a path). A malformed ``\\uXXXX`` escape raises
    ``InvalidConfigurationError`` naming the source, the line and the escape.
    """
    props = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        props[_unescape(key, source, number)] = _unescape(value, source, number)
    return props


def load_properties(path):
    """``parse_properties`` of the file at ``path`` (read as UTF-8)."""
    with open(path, encoding="utf-8") as file:
        return parse_properties(file.read(), source=str(path))


def parse_overrides(pairs):
    """Key -> value for ``key=value`` strings (Kafka's ``--override`` arguments)."""
    props = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        props[key] = value
    return props


def _logical_lines(text):
    """(number of the first physical line, logical line) for each non-comment line."""
    lines = _LINE_END.split(text)
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        first = index
        parts = []
        while _continues(line):
            parts.append(line[:-1])
            line = lines[index].lstrip(_WHITESPACE) if index < len(lines) else ""
            index += 1
        parts.append(line)
        yield first, "".join(parts)


def _continues(line):
    """Whether ``line`` ends in an odd number of backslashes (an escaped line end)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line):
    """(raw key, raw value) of one logical line."""
    escaped = False
    end = len(line)
    separator = False
    for position, char in enumerate(line):
        if not escaped and char in "=:":
            end, separator = position, True
            break
        if not escaped and char in _WHITESPACE:
            end = position
            break
        escaped = char == "\\" and not escaped
    start = end + 1
    while start < len(line):
        char = line[start]
        if char not in _WHITESPACE:
            if separator or char not in "=:":
                break
            separator = True
        start += 1
    return line[:end], line[start:]


def _unescape(raw, source, number):
    if "\\" not in raw:
        return raw

    def replace(match):
        code, malformed, char = match.groups()
        if code is not None:
            return chr(int(code, 16))
        if malformed is not None:
            raise InvalidConfigurationError(
                f"{source} line {number}: malformed escape '\\{malformed}' in {raw!r}: "
                f"expected '\\u' and 4 hex digits")
        return _SIMPLE_ESCAPES.get(char, char)

    return _ESCAPE.sub(replace, raw)
