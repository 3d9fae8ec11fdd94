"""REST for trying policy rules on a shop's past calls before setting them
(approvals.gate.backtest). Thin: parse, call one read, render."""

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from agentportal.problems import Problem
from approvals.api import TOOL_NAME, policy_editor_or_403
from approvals.gate.backtest import policy_backtest
from approvals.gate.policies import PolicyRules
from approvals.serializers import PolicyBacktestSerializer, PolicySimulateSerializer

# The period tried unless the body names one.
DEFAULT_PERIOD = timedelta(days=30)


class PolicySimulateView(APIView):
    @extend_schema(
        operation_id="policies_simulate",
        parameters=[TOOL_NAME],
        request=PolicySimulateSerializer,
        responses=PolicyBacktestSerializer,
    )
    def post(self, request, tool_name):
        principal = policy_editor_or_403(request)
        body = PolicySimulateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        until = data.pop("until", None) or timezone.now()
        since = data.pop("since", None) or until - DEFAULT_PERIOD
        if until <= since:
            raise Problem(
                400,
                "validation_error",
                "The period must end after it starts.",
                errors=[{"field": "until", "message": "after since"}],
            )
        result = policy_backtest(
            merchant=principal.merchant,
            tool_name=tool_name,
            rules=PolicyRules(**data),
            since=since,
            until=until,
        )
        return Response(PolicyBacktestSerializer(result).data)
