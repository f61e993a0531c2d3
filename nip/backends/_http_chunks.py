"""HTTP/1.1 heads and chunked bodies, for nip's lean client and its test server."""

from __future__ import annotations


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """A message head's first line (request or status line) and its headers, by lower-case name."""
    first, *lines = head.decode("latin-1").split("\r\n")
    fields = (line.partition(":") for line in lines)
    return first, {name.strip().lower(): value.strip() for name, _, value in fields}


def dechunk(buffer: bytearray, start: int, max_body: int | None = None) -> tuple[bytes, int] | None:
    """The body of a complete chunked message starting at ``start``, and where it ends.

    Returns None while the message is incomplete (read more and call again).

    Raises:
        ValueError: A chunk size is not hexadecimal, or the body grows past ``max_body``.
    """
    body = bytearray()
    position = start
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        try:
            size = int(bytes(buffer[position:line_end]).split(b";")[0], 16)
        except ValueError:
            raise ValueError("chunk size is not hexadecimal") from None
        position = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", position - 2)
            return (bytes(body), trailer_end + 4) if trailer_end >= 0 else None
        if len(buffer) < position + size + 2:
            return None
        body += buffer[position : position + size]
        position += size + 2
        if max_body is not None and len(body) > max_body:
            raise ValueError("body too large")
