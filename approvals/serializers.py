from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentportal.serializers import StrictCharField, StrictSerializer
from approvals.models import Approval, Decision
from runs.serializers import RunSerializer


class DecisionSerializer(StrictSerializer):
    interrupt_id = StrictCharField(max_length=64)
    decision = serializers.ChoiceField(choices=Decision.values)
    tool_args = serializers.JSONField(required=False)
    reason = StrictCharField(required=False, allow_blank=True, max_length=2000)

    def validate_tool_args(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("An object of the tool's arguments.")
        return value


class DecisionOnApprovalSerializer(DecisionSerializer):
    interrupt_id = StrictCharField(max_length=64, required=False)


class ApprovalSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField()
    args_digest = serializers.SerializerMethodField()
    decision = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()

    class Meta:
        model = Approval
        fields = [
            "interrupt_id",
            "run_id",
            "tool_name",
            "proposed_args",
            "approved_args",
            "executed_args",
            "args_digest",
            "status",
            "decision",
            "reason",
            "decided_by",
            "decided_at",
            "expires_at",
            "result",
            "created_at",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_args_digest(self, approval: Approval) -> str | None:
        return approval.args_digest or None

    @extend_schema_field(serializers.ChoiceField(Decision.values, allow_null=True))
    def get_decision(self, approval: Approval) -> str | None:
        return approval.decision or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reason(self, approval: Approval) -> str | None:
        return approval.reason or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decided_by(self, approval: Approval) -> str | None:
        return approval.decided_by_name


class ApprovalPageSerializer(serializers.Serializer):
    results = ApprovalSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class DecisionResultSerializer(serializers.Serializer):
    run = RunSerializer()
    approval = ApprovalSerializer()
