"""Hooks for the stateful schemathesis run (loaded with SCHEMATHESIS_HOOKS): the checks of
schemathesis_checks, and list requests without a cursor or a tool filter. Random ones match
nothing, so the list would name no id for the links to follow (the fuzzing phases try them)."""

import schemathesis

from tests.api.schemathesis_checks import schema_valid_request_refused

__all__ = ["schema_valid_request_refused"]

UNMATCHED = ("cursor", "tool")


@schemathesis.hook
def map_query(ctx, query):
    if ctx.operation is None or ctx.operation.method.upper() != "GET" or query is None:
        return query
    return {name: value for name, value in query.items() if name not in UNMATCHED}
