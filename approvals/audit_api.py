"""REST for the decision record (approvals.audit): `GET /api/v1/audit` gives a shop's entries
as JSON Lines, in chain order, a page at a time (`after` the last seq read; the `Link`
header names the next page while there is one). Operators and service keys of the shop."""

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from agentportal.problems import Problem
from agentportal.serializers import StrictIntegerField
from approvals.api import policy_editor_or_403
from approvals.audit.export import CHUNK, record_line, records_of

JSON_LINES = "application/jsonl"


class AuditQuerySerializer(serializers.Serializer):
    """Entries recorded in [`from`, `to`) (`to` after `from` when both are given), after the
    seq `after`, `limit` at most."""

    after = StrictIntegerField(min_value=0, required=False, default=0)
    limit = StrictIntegerField(min_value=1, max_value=10_000, required=False, default=1000)

    def get_fields(self):
        # `from` is a Python keyword: the fields are named here.
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField(required=False, default=None)
        fields["to"] = serializers.DateTimeField(required=False, default=None)
        return fields

    def to_internal_value(self, data):
        # Query values come as text: a number is read as one before the strict check.
        values = {key: data.get(key) for key in data}
        for name in ("after", "limit"):
            raw = values.get(name)
            if isinstance(raw, str) and raw.isascii() and raw.isdigit():
                values[name] = int(raw)
        return super().to_internal_value(values)

    def validate(self, data):
        if data["from"] and data["to"] and data["to"] <= data["from"]:
            raise serializers.ValidationError({"to": "after from"})
        return data


class AuditView(APIView):
    @extend_schema(
        operation_id="audit_list",
        parameters=[AuditQuerySerializer],
        responses={
            (200, JSON_LINES): OpenApiResponse(
                OpenApiTypes.STR,
                description="One JSON object a line: seq, at, kind, run_id, interrupt_id, "
                "tool_name, arguments, args_digest, seen_digest, actor_kind, actor, via, "
                "justification, prev_hash, hash.",
            )
        },
    )
    def get(self, request):
        principal = policy_editor_or_403(request)
        query = AuditQuerySerializer(data=request.query_params)
        if not query.is_valid():
            raise Problem(
                400,
                "validation_error",
                "The query is not valid.",
                errors=[
                    {"field": field, "message": " ".join(str(m) for m in messages)}
                    for field, messages in query.errors.items()
                ],
            )
        given = query.validated_data
        entries = records_of(
            merchant_id=principal.merchant.pk,
            since=given["from"],
            until=given["to"],
            after=given["after"],
        )
        # The page's last seq first, so the header can say whether another page follows.
        last = entries.values_list("seq", flat=True)[given["limit"] - 1 : given["limit"]].first()
        page = entries if last is None else entries.filter(seq__lte=last)
        lines = (record_line(entry) for entry in page.iterator(chunk_size=CHUNK))
        response = StreamingHttpResponse(lines, content_type=JSON_LINES)
        if last is not None and entries.filter(seq__gt=last).exists():
            params = request.query_params.copy()
            params["after"] = str(last)
            response["Link"] = f'<{request.path}?{params.urlencode()}>; rel="next"'
        return response
