"""A check for the schemathesis run (loaded with SCHEMATHESIS_HOOKS): a request the schema
accepts is never refused as malformed. Refusals that depend on state (an unknown id, a run that
has ended, a role) and other stated problems (`unknown_command`) are answers, not
disagreements."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

import schemathesis

MALFORMED = {"validation_error", "idempotency_key_missing"}

# Fields whose rules depend on what the path names or on the caller's role, stated in API.md:
# they are answers about that resource, which no schema of the body can give.
STATE_DEPENDENT = {
    # revised arguments are checked against the pending call's own tool
    "tool_args",
    # a revision's items must fit the ticket's order, and only a supervisor names them
    "items",
    # a service key names one of the shop's customers; another key names none
    "account",
    # a call is assigned to one of its shop's supervisors or approver groups
    "user",
    "group",
    # an approver group's members are supervisors of its shop
    "members",
    # an absence names a colleague of the shop, ends after now, and overlaps no other
    "delegate",
    "starts_at",
    "ends_at",
}
AUDIT = "GET /api/v1/audit"
POLICY_RULES = {"PUT /api/v1/policies/{tool_name}", "POST /api/v1/policies/{tool_name}/simulate"}
ASSIGN = "POST /api/v1/approvals/{interrupt_id}/assign"


@schemathesis.check
def schema_valid_request_refused(ctx, response, case):
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code != 400:
        return None
    problem = response.json()
    if problem.get("code") not in MALFORMED:
        return None
    fields = {_top(error.get("field", "")) for error in problem.get("errors", [])}
    if fields and fields <= STATE_DEPENDENT:
        return None
    if case.operation.label in POLICY_RULES and _thresholds_out_of_order(case.body):
        return None
    if case.operation.label in POLICY_RULES and fields == {"approver_bands"}:
        # The policy's own rules of its bands (each error names the field, not a band's
        # member): between fields, or the shop's groups, as the body's description says.
        return None
    if case.operation.label in POLICY_RULES and _period_backwards(case.body):
        return None
    if case.operation.label == ASSIGN and _names_more_than_one(case.body):
        return None
    if case.operation.label == AUDIT and _query_period_backwards(case.query):
        return None
    if _nul_in_keys_only(case.body):
        return None
    raise AssertionError(
        f"The schema accepts this request, the API refused it: {problem.get('detail')} "
        f"{problem.get('errors', '')}"
    )


def _top(field: str) -> str:
    """The body field an error's path starts with (`tool_args.amount` -> `tool_args`)."""
    return field.split(".")[0].split("[")[0]


def _thresholds_out_of_order(body) -> bool:
    """The one rule between two fields of a policy, stated in its schema's description (JSON
    Schema cannot compare fields): four eyes start above the auto-approval limit."""
    try:
        auto, four_eyes = Decimal(body["auto_approve_up_to"]), Decimal(body["two_approvers_from"])
    except (KeyError, TypeError, InvalidOperation):
        return False
    return auto >= four_eyes


def _period_backwards(body) -> bool:
    """A tried period ends after it starts (stated in its schema's description); one side
    missing is now, or 30 days before the end."""
    if not isinstance(body, dict):
        return False
    try:
        until = _aware(body["until"]) if body.get("until") else datetime.now(UTC)
        since = _aware(body["since"]) if body.get("since") else until - timedelta(days=30)
    except (TypeError, ValueError):
        return False
    return until <= since


def _query_period_backwards(query) -> bool:
    """The record's period, both ends given, ends after it starts (its description says)."""
    if not isinstance(query, dict) or not (query.get("from") and query.get("to")):
        return False
    try:
        return _aware(query["to"]) <= _aware(query["from"])
    except (TypeError, ValueError):
        return False


def _aware(text: str) -> datetime:
    """A time as the API reads it: one without an offset is in UTC (the portal's zone)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _names_more_than_one(body) -> bool:
    """The rule between an assignment's fields, stated in its schema's description: a person
    or a group, and a claim names nobody."""
    if not isinstance(body, dict):
        return False
    named = bool(body.get("user")) + bool(body.get("group")) + bool(body.get("claim"))
    return named > 1


def _nul_in_keys_only(body) -> bool:
    """A NUL in a key of free JSON (a call's edited arguments): refused, as ToolArguments'
    description says; OpenAPI 3.0 cannot state a rule of keys (no `propertyNames`)."""
    keys, values = [], []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                keys.append(key)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, str):
            values.append(node)

    walk(body)
    return any("\x00" in key for key in keys) and not any("\x00" in value for value in values)
