"""RFC 9457 problem responses for every API error."""

import json
import logging
import math
import time
from datetime import UTC
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.db.backends.signals import connection_created
from django.dispatch import receiver
from django.http import Http404, HttpRequest, HttpResponse
from psycopg_pool import PoolTimeout
from rest_framework import exceptions

from agentportal import errors

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/problem+json"

TITLES = {
    "service_unavailable": "Service unavailable",
    "validation_error": "Invalid request",
    "idempotency_key_missing": "Idempotency-Key header required",
    "unknown_command": "Unknown command",
    "not_authenticated": "Authentication required",
    "permission_denied": "Permission denied",
    "not_found": "Not found",
    "run_not_found": "Run not found",
    "method_not_allowed": "Method not allowed",
    "not_acceptable": "Not acceptable",
    "unsupported_media_type": "Unsupported media type",
    "interrupt_mismatch": "Interrupt does not match",
    "already_decided": "Already decided",
    "same_approver": "Already approved by you",
    "arguments_changed": "The arguments changed",
    "version_conflict": "Version conflict",
    "not_waiting": "Run is not waiting",
    "run_finished": "Run has finished",
    "invalid_transition": "Invalid transition",
    "idempotency_key_in_flight": "Request with this Idempotency-Key in flight",
    "conversation_closed": "Conversation closed",
    "interrupt_expired": "Interrupt expired",
    "snapshot_invalid": "State snapshot invalid",
    "snapshot_version_unsupported": "State snapshot version unsupported",
    "idempotency_key_reused": "Idempotency-Key reused with another request",
    "too_many_open_runs": "Too many open runs",
    "too_many_open_conversations": "Too many open conversations",
    "too_many_queued_messages": "Too many messages waiting",
    "too_many_streams": "Too many open event streams",
    "rate_limited": "Too many requests",
    "payload_too_large": "Payload too large",
    "server_error": "Internal server error",
}


# Every refusal a service can raise, and the problem the API answers it with.
DOMAIN_PROBLEMS: dict[type[errors.DomainError], tuple[int, str]] = {
    errors.InvalidInput: (400, "validation_error"),
    errors.UnknownCommand: (400, "unknown_command"),
    errors.NotAllowed: (403, "permission_denied"),
    errors.NotFound: (404, "not_found"),
    errors.InterruptMismatch: (409, "interrupt_mismatch"),
    errors.AlreadyDecided: (409, "already_decided"),
    errors.SameApprover: (409, "same_approver"),
    errors.ArgumentsChanged: (409, "arguments_changed"),
    errors.VersionConflict: (409, "version_conflict"),
    errors.NotWaiting: (409, "not_waiting"),
    errors.RunFinished: (409, "run_finished"),
    errors.InvalidTransition: (409, "invalid_transition"),
    errors.IdempotencyKeyInFlight: (409, "idempotency_key_in_flight"),
    errors.ConversationClosed: (409, "conversation_closed"),
    errors.InterruptExpired: (410, "interrupt_expired"),
    errors.SnapshotInvalid: (422, "snapshot_invalid"),
    errors.SnapshotVersionUnsupported: (422, "snapshot_version_unsupported"),
    errors.IdempotencyKeyReused: (422, "idempotency_key_reused"),
    errors.TooManyOpenRuns: (429, "too_many_open_runs"),
    errors.TooManyOpenConversations: (429, "too_many_open_conversations"),
    errors.TooManyQueuedMessages: (429, "too_many_queued_messages"),
}


# The status of every code the API answers with.
STATUSES: dict[str, int] = {
    "validation_error": 400,
    "idempotency_key_missing": 400,
    "not_authenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "run_not_found": 404,
    "method_not_allowed": 405,
    "not_acceptable": 406,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limited": 429,
    "too_many_streams": 429,
    "service_unavailable": 503,
} | {code: status for status, code in DOMAIN_PROBLEMS.values()}


def iso_z(moment) -> str | None:
    """A time as the API writes it: ISO 8601 in UTC with a Z."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Problem(Exception):
    """An error with a stable code; raised by services, rendered by the API and the pages."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str = "",
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ):
        super().__init__(detail or code)
        self.status = status
        self.code = code
        self.detail = detail or TITLES.get(code, code)
        self.errors = errors
        self.headers = headers
        self.extensions = extensions


def problem_of(error: errors.DomainError) -> "Problem":
    """The problem a service's refusal is answered with: its class's row of DOMAIN_PROBLEMS,
    or the nearest of its ancestors'."""
    for kind in type(error).__mro__:
        if kind in DOMAIN_PROBLEMS:
            status, code = DOMAIN_PROBLEMS[kind]
            return Problem(status, code, error.detail, errors=error.errors, **error.context)
    raise LookupError(f"{type(error).__name__} has no problem in DOMAIN_PROBLEMS")


def problem_body(
    *, request: HttpRequest | None, status: int, code: str, detail: str, errors=None, **extra
):
    body = {
        "type": f"/problems/{code}",
        "title": TITLES.get(code, code.replace("_", " ").capitalize()),
        "status": status,
        "detail": detail,
        "instance": request.path if request is not None else None,
        "code": code,
    }
    if request is not None:
        body["type"] = request.build_absolute_uri(body["type"])
    if errors is not None:
        body["errors"] = errors
    body.update(extra)
    return body


def problem_response(
    request: HttpRequest | None,
    status: int,
    code: str,
    detail: str,
    *,
    errors=None,
    headers: dict[str, str] | None = None,
    **extra,
) -> HttpResponse:
    body = problem_body(
        request=request, status=status, code=code, detail=detail, errors=errors, **extra
    )
    response = HttpResponse(json.dumps(body, default=str), status=status, content_type=CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def from_problem(request: HttpRequest | None, problem: Problem) -> HttpResponse:
    return problem_response(
        request,
        problem.status,
        problem.code,
        problem.detail,
        errors=problem.errors,
        headers=problem.headers,
        **problem.extensions,
    )


def flatten_errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested error detail as a flat list of {field, message}."""
    if isinstance(detail, dict):
        errors = []
        for key, value in detail.items():
            field = key if key != "non_field_errors" else ""
            errors.extend(
                flatten_errors(value, f"{prefix}.{field}" if prefix and field else prefix or field)
            )
        return errors
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return [{"field": prefix, "message": str(item)} for item in detail]
        errors = []
        for index, item in enumerate(detail):
            errors.extend(flatten_errors(item, f"{prefix}[{index}]"))
        return errors
    return [{"field": prefix, "message": str(detail)}]


def pydantic_errors(error, *prefix: str) -> list[dict[str, str]]:
    """A pydantic ValidationError's errors as field errors, their paths under `prefix`."""
    return [
        {"field": ".".join([*prefix, *(str(part) for part in e["loc"])]), "message": e["msg"]}
        for e in error.errors()
    ]


def exception_handler(exc: Exception, context: dict) -> HttpResponse:
    """DRF's EXCEPTION_HANDLER: every error, expected or not, becomes a problem response.

    It returns a plain HttpResponse, so DRF does not re-render it through content
    negotiation: the content type is application/problem+json whatever the client accepts.
    """
    request = context.get("request")
    if isinstance(exc, errors.DomainError):
        return from_problem(request, problem_of(exc))
    if isinstance(exc, Problem):
        return from_problem(request, exc)
    if isinstance(exc, RequestDataTooBig):
        return problem_response(request, 413, "payload_too_large", "The body is too large.")
    if isinstance(exc, exceptions.ValidationError):
        return problem_response(
            request,
            400,
            "validation_error",
            "The request is not valid.",
            errors=flatten_errors(exc.detail),
        )
    if isinstance(exc, exceptions.ParseError):
        return problem_response(
            request,
            400,
            "validation_error",
            str(exc.detail),
            errors=[{"field": "", "message": str(exc.detail)}],
        )
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return problem_response(
            request,
            401,
            "not_authenticated",
            str(exc.detail),
            headers={"WWW-Authenticate": 'Bearer realm="api"'},
        )
    if isinstance(exc, (exceptions.PermissionDenied, DjangoPermissionDenied)):
        detail = getattr(exc, "detail", None) or "You may not do this."
        return problem_response(request, 403, "permission_denied", str(detail))
    if isinstance(exc, (exceptions.NotFound, Http404)):
        return problem_response(request, 404, "not_found", "Not found.")
    if isinstance(exc, exceptions.MethodNotAllowed):
        return problem_response(request, 405, "method_not_allowed", str(exc.detail))
    if isinstance(exc, exceptions.NotAcceptable):
        return problem_response(request, 406, "not_acceptable", str(exc.detail))
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return problem_response(request, 415, "unsupported_media_type", str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        wait = max(1, math.ceil(exc.wait or 1))
        return problem_response(
            request,
            429,
            "rate_limited",
            f"Too many requests; try again in {wait} seconds.",
            headers={"Retry-After": str(wait)},
        )
    if isinstance(exc, exceptions.APIException):
        return problem_response(request, exc.status_code, "error", str(exc.detail))
    if isinstance(exc, DATABASE_AWAY):
        return database_away_response(request, exc)
    logger.exception("unhandled error in %s", request.path if request else "API")
    return problem_response(request, 500, "server_error", "Something went wrong on our side.")


# What Django raises when the database cannot be reached or stops answering (a restart, a
# failover), or when every connection of the web process's pool stayed in use while a request
# waited for one: the request may succeed if sent again in a moment.
DATABASE_AWAY = (OperationalError, InterfaceError)
RETRY_AFTER_DATABASE_AWAY = 5
RETRY_AFTER_POOL_BUSY = 1


# When this process last got a database connection: a pool that cannot connect times out
# the same way as one whose connections are all in use, and only the latter got any lately.
_connected_at = -math.inf
CONNECTED_LATELY_SECONDS = 15


@receiver(connection_created)
def _connected(**kwargs) -> None:
    global _connected_at
    _connected_at = time.monotonic()


def pool_busy(error: Exception) -> bool:
    """The database answers, but the pool had no connection free for the whole wait."""
    return (
        isinstance(error.__cause__, PoolTimeout)
        and time.monotonic() - _connected_at < CONNECTED_LATELY_SECONDS
    )


def database_away_response(request: HttpRequest | None, error: Exception) -> HttpResponse:
    path = request.path if request else "?"
    if pool_busy(error):
        logger.warning("every pooled database connection in use during %s", path)
        return problem_response(
            request,
            503,
            "service_unavailable",
            "The service is busy just now; try again in a second.",
            headers={"Retry-After": str(RETRY_AFTER_POOL_BUSY)},
        )
    logger.warning("database unavailable during %s: %s", path, error)
    return problem_response(
        request,
        503,
        "service_unavailable",
        "The service cannot reach its database just now; try again in a few seconds.",
        headers={"Retry-After": str(RETRY_AFTER_DATABASE_AWAY)},
    )


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return problem_response(request, 404, "not_found", "No such resource.")


def api_server_error(request: HttpRequest) -> HttpResponse:
    return problem_response(request, 500, "server_error", "Something went wrong on our side.")
