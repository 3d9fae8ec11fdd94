"""REST endpoints for runs. Thin: parse, call one selector or service, render."""

from django.conf import settings
from django.db import connection
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.counters import Slots, counter_key
from agentportal.principals import Principal
from agentportal.problems import Problem
from agentportal.schema import ids_from, link, problems
from agentportal.selectors import customer_membership_by_username
from agentportal.serializers import IDEMPOTENCY_KEY_HEADER, idempotency_key_from
from runs import event_stream, inputs, live_hub, selectors, services
from runs.models import AgentRun, RunStatus
from runs.serializers import (
    ReceiptResultSerializer,
    ReceiptSerializer,
    RunCreateSerializer,
    RunEventSerializer,
    RunEventsSerializer,
    RunInputCreateSerializer,
    RunPageSerializer,
    RunSerializer,
)

# Where the ids a path takes come from, for the schema's links (`agentportal.schema.link`).
RUN_FROM = (
    link("runs_create", 201, run_id="$response.body#/id"),
    link("runs_list", 200, run_id="$response.body#/results/0/id"),
)
RUN_SEEN = link("runs_retrieve", 200, run_id="$response.body#/id")

PAGE_SIZE = 50
# The largest event sequence number a client may ask after (the column's range).
MAX_SEQ = 2**31 - 1
AFTER = OpenApiParameter(
    "after",
    {"type": "integer", "minimum": 0, "maximum": MAX_SEQ},
    description="Only events with a greater `seq`.",
)


# One event of the stream (OpenAPI 3.0 describes a stream by its events).
SERVER_SENT_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The event's `seq`."},
        "event": {"type": "string", "description": "The event's `type`."},
        "data": {"type": "string", "description": "The event as `/events` lists it, in JSON."},
    },
    "required": ["id", "event", "data"],
}


def cursor_parameter(model) -> OpenApiParameter:
    return OpenApiParameter(
        "cursor",
        {"type": "string", "pattern": selectors.cursor_pattern(model)},
        description="The `next` of the page before.",
    )


def principal_of(request) -> Principal:
    return request.auth


def run_or_404(request, run_id):
    run = selectors.run_for(principal_of(request), run_id)
    if run is None:
        raise Problem(404, "run_not_found", "No such run.")
    return run


def filtered_page(request, queryset, *, statuses, **filters):
    """A list endpoint's page: `status` checked against `statuses`, exact `filters` applied
    (query parameter -> field), newest first, a 400 problem for a bad value or cursor."""
    wanted = request.query_params.get("status")
    if wanted is not None:
        if wanted not in statuses:
            raise Problem(
                400,
                "validation_error",
                "Unknown status.",
                errors=[{"field": "status", "message": f"one of {', '.join(statuses)}"}],
            )
        queryset = queryset.filter(status=wanted)
    for parameter, field in filters.items():
        if value := request.query_params.get(parameter):
            queryset = queryset.filter(**{field: value})
    try:
        return selectors.page_newest_first(
            queryset, cursor=request.query_params.get("cursor"), size=PAGE_SIZE
        )
    except selectors.InvalidCursor as error:
        raise Problem(
            400, "validation_error", str(error), errors=[{"field": "cursor", "message": str(error)}]
        ) from error


def int_param(request, name: str, default: int = 0) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # Digits only: int() would also take " 1", "1_0" and other scripts' digits.
    value = int(raw) if raw.isascii() and raw.isdigit() else -1
    if not 0 <= value <= MAX_SEQ:
        raise Problem(
            400,
            "validation_error",
            f"{name} must be a whole number from 0 to {MAX_SEQ}.",
            errors=[{"field": name, "message": f"a whole number from 0 to {MAX_SEQ}"}],
        )
    return value


def customer_for(principal: Principal, data: dict):
    """The customer a request acts for: the caller, or the `account` a service key names."""
    if not (principal.is_customer or principal.is_service):
        raise Problem(403, "permission_denied", "Only customers and service keys do this.")
    if principal.is_service:
        if "account" not in data:
            raise Problem(
                400,
                "validation_error",
                "A service key names the customer in account.",
                errors=[{"field": "account", "message": "This field is required."}],
            )
        membership = customer_membership_by_username(
            merchant=principal.merchant, username=data["account"]
        )
        if membership is None:
            raise Problem(
                400,
                "validation_error",
                "No such customer in this shop.",
                errors=[{"field": "account", "message": "not a customer of this shop"}],
            )
        return membership.user
    if "account" in data:
        raise Problem(403, "permission_denied", "Only service keys act for another account.")
    return principal.user


class RunsView(APIView):
    @extend_schema(
        operation_id="runs_list",
        parameters=[
            OpenApiParameter("status", str, enum=list(RunStatus.values)),
            cursor_parameter(AgentRun),
        ],
        responses=RunPageSerializer,
    )
    def get(self, request):
        runs = selectors.runs_visible_to(principal_of(request))
        page, next_cursor = filtered_page(request, runs, statuses=RunStatus.values)
        return Response({"results": RunSerializer(page, many=True).data, "next": next_cursor})

    @extend_schema(
        operation_id="runs_create",
        request=RunCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={201: RunSerializer, 200: RunSerializer},
        extensions=problems(
            "idempotency_key_missing",
            "idempotency_key_in_flight",
            "invalid_transition",
            "idempotency_key_reused",
            "too_many_open_runs",
        ),
    )
    def post(self, request):
        principal = principal_of(request)
        if not (principal.is_customer or principal.is_service):
            raise Problem(403, "permission_denied", "Only customers and service keys start runs.")
        key = idempotency_key_from(request)
        serializer = RunCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        account = customer_for(principal, data)
        run, created = services.queue_run(
            merchant=principal.merchant,
            account=account,
            messages=[{"role": "user", "content": data["message"]}],
            idempotency_scope=principal.scope,
            idempotency_key=key,
            payload_hash=services.request_hash({"message": data["message"], "account": account.pk}),
        )
        if created:
            return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)
        # A replay re-checks access now: a revoked member gets nothing back.
        run = run_or_404(request, run.pk)
        return Response(RunSerializer(run).data, headers={"Idempotent-Replayed": "true"})


class RunDetailView(APIView):
    @extend_schema(
        operation_id="runs_retrieve",
        responses=RunSerializer,
        extensions=problems("run_not_found") | ids_from(*RUN_FROM),
    )
    def get(self, request, run_id):
        return Response(RunSerializer(run_or_404(request, run_id)).data)


class RunCancelView(APIView):
    @extend_schema(
        operation_id="runs_cancel",
        request=None,
        responses=RunSerializer,
        extensions=problems("run_not_found", "run_finished") | ids_from(*RUN_FROM, RUN_SEEN),
    )
    def post(self, request, run_id):
        run = run_or_404(request, run_id)
        run = services.run_cancel(
            run=run, reason=f"cancelled by {principal_of(request).public_name}"
        )
        return Response(RunSerializer(run).data)


class RunInputsView(APIView):
    @extend_schema(
        operation_id="runs_inputs",
        request=RunInputCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={202: ReceiptResultSerializer, 200: ReceiptResultSerializer},
        extensions=problems(
            "idempotency_key_missing",
            "run_not_found",
            "interrupt_mismatch",
            "not_waiting",
            "run_finished",
            "version_conflict",
            "interrupt_expired",
            "snapshot_invalid",
            "idempotency_key_reused",
        )
        | ids_from(
            link(
                "runs_retrieve",
                200,
                run_id="$response.body#/id",
                body={
                    "interrupt_id": "$response.body#/pending/0/interrupt_id",
                    "run_version": "$response.body#/version",
                },
            )
        ),
    )
    def post(self, request, run_id):
        principal = principal_of(request)
        run = run_or_404(request, run_id)
        if not (principal.is_customer or principal.is_service):
            raise Problem(403, "permission_denied", "Only the customer answers the agent.")
        key = idempotency_key_from(request)
        serializer = RunInputCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        receipt, run, created = inputs.run_input_accept(
            run=run,
            request=inputs.InputRequest(
                idempotency_key=key, idempotency_scope=principal.scope, **serializer.validated_data
            ),
            author=principal.name,
        )
        body = {"receipt": ReceiptSerializer(receipt).data, "run": RunSerializer(run).data}
        if created:
            return Response(body, status=status.HTTP_202_ACCEPTED)
        return Response(body, headers={"Idempotent-Replayed": "true"})


class RunReceiptView(APIView):
    @extend_schema(
        operation_id="runs_receipt",
        responses=ReceiptResultSerializer,
        extensions=problems("run_not_found")
        | ids_from(
            link(
                "runs_inputs",
                202,
                run_id="$response.body#/run/id",
                idempotency_key="$request.header.Idempotency-Key",
            )
        ),
    )
    def get(self, request, run_id, idempotency_key):
        run = run_or_404(request, run_id)
        if not principal_of(request).is_service:
            raise Problem(403, "permission_denied", "Receipts are looked up with a service key.")
        receipt = selectors.run_receipt(run=run, idempotency_key=idempotency_key)
        if receipt is None:
            raise Problem(404, "not_found", "No receipt with this key for this run.")
        return Response(
            {"receipt": ReceiptSerializer(receipt).data, "run": RunSerializer(run).data}
        )


class RunEventsView(APIView):
    @extend_schema(
        operation_id="runs_events",
        parameters=[AFTER],
        responses=RunEventsSerializer,
        extensions=problems("run_not_found") | ids_from(*RUN_FROM, RUN_SEEN),
    )
    def get(self, request, run_id):
        run = run_or_404(request, run_id)
        events = selectors.run_events_after(run=run, after=int_param(request, "after"))
        return Response(
            {"events": RunEventSerializer(events, many=True).data, "last_seq": run.last_event_seq}
        )


class EventStreamRenderer(renderers.BaseRenderer):
    media_type = "text/event-stream"
    format = "event-stream"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data


class RunEventStreamView(APIView):
    renderer_classes = [renderers.JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="runs_events_stream",
        parameters=[
            AFTER,
            OpenApiParameter(
                "Last-Event-ID",
                str,
                OpenApiParameter.HEADER,
                description="The `id` of the last event received: the stream resumes after it.",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                SERVER_SENT_EVENT,
                description=(
                    "Server-sent events, one per run event, and a comment line (`: keep-alive`) "
                    "after 15 s without one. The stream ends after the run's final event, or "
                    "after 4 to 5 minutes: reconnect with `Last-Event-ID`."
                ),
            )
        },
        extensions=problems("run_not_found", "too_many_streams"),
    )
    def get(self, request, run_id):
        run = run_or_404(request, run_id)
        after = int_param(request, "after")
        last_event_id = request.headers.get("Last-Event-ID", "")
        # An id this stream never sent (not ASCII digits, or out of range) is ignored.
        if last_event_id.isascii() and last_event_id.isdigit() and int(last_event_id) <= MAX_SEQ:
            after = max(after, int(last_event_id))
        slot = _stream_slot(principal_of(request))
        response = StreamingHttpResponse(
            event_stream.ClosingStream(
                event_stream.run_event_stream(run.pk, after), lambda: Slots.give_back(slot)
            ),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        if not connection.in_atomic_block:
            # Otherwise this request's connection would be kept until the stream ends (up to
            # 30 s); the stream reads with connections of its own while it reads.
            connection.close()
        return response


def _stream_slot(principal: Principal) -> str:
    """One of the key's few event-stream slots, held until its stream ends: one key cannot
    hold every connection the web servers have."""
    limit = settings.AGENTPORTAL["MAX_EVENT_STREAMS_PER_KEY"]
    slots = Slots(
        counter_key("streams", str(principal.api_key.pk)), limit, live_hub.STREAM_SECONDS + 10
    )
    slot = slots.take()
    if slot is None:
        raise Problem(
            429,
            "too_many_streams",
            f"This key already has {limit} event streams open; close one, or read /events instead.",
            # A stream whose client went away is noticed at its next keep-alive line.
            headers={"Retry-After": str(int(live_hub.KEEPALIVE_SECONDS))},
        )
    return slot
