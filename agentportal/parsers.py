"""The API's JSON parser: what a client sends is read with limits, never with a crash."""

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Deeper than any body this API takes (tool arguments included): a bound on recursion, for the
# parser and for everything that walks the body after it.
MAX_DEPTH = 32


class LimitedJSONParser(JSONParser):
    """JSON without NUL characters (PostgreSQL's text and jsonb refuse them) and nested at
    most MAX_DEPTH deep."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON nested more than {MAX_DEPTH} deep.") from None
        _check(data)
        return data


def _check(data: Any) -> None:
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"JSON nested more than {MAX_DEPTH} deep.")
        if isinstance(value, str):
            if "\x00" in value:
                raise ParseError("Text may not contain NUL characters.")
        elif isinstance(value, dict):
            for key, item in value.items():
                pending.append((key, depth))
                pending.append((item, depth + 1))
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
