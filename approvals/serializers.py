import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentportal.serializers import (
    NOT_BLANK,
    InterruptIdField,
    StrictBooleanField,
    StrictCharField,
    StrictEmailField,
    StrictIntegerField,
    StrictSerializer,
)
from approvals.gate.bands import MAX_APPROVALS, ApproverBand
from approvals.gate.policies import MAX_SECONDS, policy_amount_fields
from approvals.models import (
    Approval,
    ApprovalStatus,
    CancelCause,
    Decision,
)
from runs.serializers import RunSerializer

DIGEST = re.compile(r"[0-9a-f]{64}")


@extend_schema_field({"type": "string", "pattern": "^[0-9a-f]{64}$"})
class ArgsDigestField(StrictCharField):
    """The digest of the arguments the decider saw, as the approval representation gives it.
    Required to approve a call that was revised or already holds an approval."""

    default_error_messages = {"digest": "The args_digest the approval shows: 64 hex digits."}

    def __init__(self, **kwargs):
        super().__init__(required=False, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not DIGEST.fullmatch(value):
            self.fail("digest")
        return value


class DecisionSerializer(StrictSerializer):
    interrupt_id = InterruptIdField()
    decision = serializers.ChoiceField(choices=Decision.choices)
    tool_args = serializers.JSONField(required=False)
    reason = StrictCharField(required=False, allow_blank=True, max_length=2000)
    args_digest = ArgsDigestField()

    def validate_tool_args(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("An object of the tool's arguments.")
        return value


class DecisionOnApprovalSerializer(DecisionSerializer):
    interrupt_id = InterruptIdField(required=False)


class ApprovalGivenSerializer(serializers.Serializer):
    by = serializers.CharField(source="voter_name")
    at = serializers.DateTimeField(source="created_at")
    decision = serializers.ChoiceField(choices=[Decision.APPROVE, Decision.REVISE])


class PolicyRefSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="policy_id")
    version = serializers.IntegerField()


# A pattern, not an enum: the schema's enums are named by their field, and runs' pending items
# publish theirs as the one "kind".
@extend_schema_field({"type": "string", "pattern": "^(person|group)$"})
class AssigneeKindField(serializers.CharField):
    pass


class AssignmentSerializer(serializers.Serializer):
    """Who is on a call: a supervisor ("person") or an approver group of the shop."""

    kind = AssigneeKindField()
    name = serializers.CharField()
    assigned_at = serializers.DateTimeField()


class AssignRequestSerializer(StrictSerializer):
    """Assign a call to a supervisor of its shop (`user`) or an approver group of its shop
    (`group`), not both; name neither to unassign it. Or `claim` it for yourself, naming
    nobody."""

    user = StrictCharField(required=False, allow_null=True, max_length=150, validators=[NOT_BLANK])
    group = StrictCharField(required=False, allow_null=True, max_length=64, validators=[NOT_BLANK])
    claim = StrictBooleanField(required=False, default=False)

    def validate(self, data):
        if data.get("claim") and (data.get("user") or data.get("group")):
            raise serializers.ValidationError(
                {"claim": "A claim names nobody: it takes the call for you."}
            )
        return data


class ApproverGroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    members = serializers.SerializerMethodField()

    def get_members(self, group) -> list[str]:
        return sorted(member.get_username() for member in group.members.all())


class ApproverGroupListSerializer(serializers.Serializer):
    results = ApproverGroupSerializer(many=True)


class ApproverGroupRequestSerializer(StrictSerializer):
    """The group's members, all of them: supervisors of the shop, by username."""

    members = serializers.ListField(
        child=StrictCharField(max_length=150, validators=[NOT_BLANK]), max_length=100
    )


class ApprovalSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField()
    approvals_given = ApprovalGivenSerializer(source="current_votes", many=True)
    policy = PolicyRefSerializer(source="policy_version", allow_null=True)
    required_approvals = serializers.IntegerField(min_value=1, max_value=MAX_APPROVALS)
    # The approver group whose members' approvals count (the policy's band); null: any
    # supervisor of the shop.
    required_group = serializers.SerializerMethodField()
    args_digest = serializers.SerializerMethodField()
    decision = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()
    decided_by = serializers.SerializerMethodField()
    cancel_cause = serializers.SerializerMethodField()
    assigned_to = serializers.SerializerMethodField()

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
            "cancel_cause",
            "required_approvals",
            "required_group",
            "approvals_given",
            "policy",
            "escalated_at",
            "assigned_to",
            "result",
            "created_at",
        ]

    @extend_schema_field(AssignmentSerializer(allow_null=True))
    def get_assigned_to(self, approval: Approval) -> dict | None:
        if not approval.is_assigned:
            return None
        return AssignmentSerializer(
            {
                "kind": "group" if approval.assigned_group_id else "person",
                "name": approval.assigned_name,
                "assigned_at": approval.assigned_at,
            }
        ).data

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_args_digest(self, approval: Approval) -> str | None:
        """While the call is pending, the digest of the arguments an approval would approve
        now: the one a decision names to say what it saw."""
        if approval.status == ApprovalStatus.PENDING_APPROVAL:
            return approval.digest_on_the_table
        return approval.args_digest or None

    @extend_schema_field(serializers.ChoiceField(Decision.choices, allow_null=True))
    def get_decision(self, approval: Approval) -> str | None:
        return approval.decision or None

    @extend_schema_field(serializers.ChoiceField(CancelCause.choices, allow_null=True))
    def get_cancel_cause(self, approval: Approval) -> str | None:
        return approval.cancel_cause or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reason(self, approval: Approval) -> str | None:
        return approval.reason or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_required_group(self, approval: Approval) -> str | None:
        return approval.required_group or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decided_by(self, approval: Approval) -> str | None:
        return approval.decided_by_name


class ApprovalPageSerializer(serializers.Serializer):
    results = ApprovalSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class DecisionResultSerializer(serializers.Serializer):
    run = RunSerializer()
    approval = ApprovalSerializer()


# --- approval policies -----------------------------------------------------------------------

# An amount of a policy as the API writes and takes it: a decimal string of up to 8 digits and
# 2 places ("10.00"). The parser lets a minus sign through for the policy's own rule to refuse
# (policies.policy_rules_check: "must not be negative"); the schema states what is accepted.
AMOUNT_SCHEMA = {
    "type": "string",
    "format": "decimal",
    "pattern": r"^\d{1,8}(?:\.\d{1,2})?$",
    "example": "10.00",
}
AMOUNT = re.compile(r"-?\d{1,8}(?:\.\d{1,2})?")


@extend_schema_field(AMOUNT_SCHEMA)
class AmountField(serializers.DecimalField):
    default_error_messages = {"invalid": 'A decimal string such as "10.00" (2 places at most).'}

    def __init__(self, **kwargs):
        super().__init__(max_digits=10, decimal_places=2, **kwargs)

    def validate_empty_values(self, data):
        # Only null is null: DRF's DecimalField would read "" and blanks as null, which a PUT of
        # a policy then stores as "never".
        return serializers.Field.validate_empty_values(self, data)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not AMOUNT.fullmatch(data):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_SECONDS})
class SecondsField(StrictIntegerField):
    """Seconds a call may wait; below one is refused by the policy's own rule."""

    def __init__(self, **kwargs):
        super().__init__(max_value=MAX_SECONDS, **kwargs)


class ApproverBandSerializer(StrictSerializer):
    """One band of a policy: the calls from the amount `from` (null: every amount) need
    `approvals` people of the approver group `group` (null: any supervisor of the shop)."""

    approvals = StrictIntegerField(min_value=1, max_value=MAX_APPROVALS)
    group = StrictCharField(
        max_length=64, allow_null=True, required=False, default=None, validators=[NOT_BLANK]
    )

    def get_fields(self):
        # `from` is a Python keyword: the field is named here.
        fields = super().get_fields()
        fields["from"] = AmountField(allow_null=True, required=False, default=None)
        return fields

    def to_internal_value(self, data) -> ApproverBand:
        values = super().to_internal_value(data)
        return ApproverBand(
            from_amount=values["from"], approvals=values["approvals"], group=values["group"]
        )


class PolicyRulesSerializer(StrictSerializer):
    """A PUT of a policy: its rules, all of them (null: never). `two_approvers_from` lies above
    `auto_approve_up_to` when both are set; it is the shorthand of one band (two people of any
    group from that amount), so a body gives it or `approver_bands`, not both. Bands start at
    different amounts, each above `auto_approve_up_to`, and name approver groups of the shop."""

    amount_field = StrictCharField(max_length=64)

    def get_fields(self):
        # The amounts a policy can weigh are known once the tools are registered; the policy's
        # own rule (policies.policy_rules_check) names the ones of its tool.
        fields = super().get_fields()
        extend_schema_field(
            {
                "type": "string",
                "enum": policy_amount_fields(),
                "description": "The argument of the tool's calls the thresholds weigh.",
            }
        )(fields["amount_field"])
        return fields

    auto_approve_up_to = AmountField(allow_null=True)
    two_approvers_from = AmountField(allow_null=True)
    approver_bands = ApproverBandSerializer(many=True, required=False, default=list)
    escalate_after_seconds = SecondsField(allow_null=True)
    escalate_to_operators = StrictBooleanField(default=True)
    escalate_to_email = StrictEmailField(allow_blank=True, max_length=254, default="")


class PolicySimulateSerializer(PolicyRulesSerializer):
    """Rules to try on the shop's past calls, over [`since`, `until`): the last 30 days unless
    given; `until` comes after `since`."""

    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)


class PolicyBacktestSerializer(serializers.Serializer):
    """What the rules would have done to the period's calls (of at most 50,000, the newest:
    `truncated` says so)."""

    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    calls = serializers.IntegerField()
    auto_approved = serializers.IntegerField()
    auto_approved_money = serializers.DecimalField(max_digits=14, decimal_places=2)
    auto_approved_people_rejected = serializers.IntegerField()
    auto_approved_people_revised = serializers.IntegerField()
    money_against_people = serializers.DecimalField(max_digits=14, decimal_places=2)
    two_approvers = serializers.IntegerField()
    waiting_for_people = serializers.IntegerField()
    inbox_per_day = serializers.FloatField()
    truncated = serializers.BooleanField()


class PolicySerializer(serializers.Serializer):
    """A shop's policy of one tool, as its current version says. `id` and `version` are what
    an approval it decided names: `policy:<id>@<version>`."""

    id = serializers.IntegerField()
    tool_name = serializers.CharField()
    version = serializers.IntegerField(source="current.version")
    amount_field = serializers.CharField(source="current.amount_field")
    auto_approve_up_to = AmountField(source="current.auto_approve_up_to", allow_null=True)
    two_approvers_from = AmountField(source="current.two_approvers_from", allow_null=True)
    # The bands the gate reads: the shorthand's one band when it was given.
    approver_bands = ApproverBandSerializer(source="current.approver_bands", many=True)
    escalate_after_seconds = serializers.IntegerField(
        source="current.escalate_after_seconds", allow_null=True
    )
    escalate_to_operators = serializers.BooleanField(source="current.escalate_to_operators")
    escalate_to_email = serializers.CharField(source="current.escalate_to_email")
    # When the rules in force were written: the current version's time.
    updated_at = serializers.DateTimeField(source="current.created_at")


class PolicyListSerializer(serializers.Serializer):
    results = PolicySerializer(many=True)


# --- absences ----------------------------------------------------------------------------------


class AbsenceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    user = serializers.CharField(source="user.username")
    delegate = serializers.CharField(source="delegate.username")
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()


class AbsenceListSerializer(serializers.Serializer):
    results = AbsenceSerializer(many=True)


class AbsenceRequestSerializer(StrictSerializer):
    """A supervisor away from the shop from `starts_at` (now unless given) until `ends_at`,
    which must come after it and after now, `delegate` (another supervisor of the shop)
    standing in. A person's key sets its person's absence; a service key names `user`."""

    user = StrictCharField(required=False, max_length=150, validators=[NOT_BLANK])
    delegate = StrictCharField(max_length=150, validators=[NOT_BLANK])
    starts_at = serializers.DateTimeField(required=False)
    ends_at = serializers.DateTimeField()
