"""Talking to the product's real web server (the web_server fixture) over HTTP."""

import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # by lower-case name
    body: str


def _headers(message) -> dict[str, str]:
    return {name.lower(): value for name, value in message.items()}


def get(base: str, path: str, *, key: str = "", timeout: float = 40, **headers) -> Answer:
    """GET path and read the whole answer (an event stream until the server ends it)."""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(base + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, _headers(response.headers), response.read().decode())
    except urllib.error.HTTPError as error:
        return Answer(error.code, _headers(error.headers), error.read().decode())


def open_stream(base: str, path: str, *, key: str = "", **headers) -> http.client.HTTPResponse:
    """Start reading an event stream and keep it open: the status and headers are read, the
    body is left to the caller (close() ends it)."""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", path, headers={"Accept": "text/event-stream", **headers})
    return connection.getresponse()


def next_event(stream: http.client.HTTPResponse) -> str:
    """The stream's next event (or comment), whole: its lines up to the blank one."""
    lines = []
    while (line := stream.readline().decode()) != "\n":
        lines.append(line)
    return "".join(lines)
