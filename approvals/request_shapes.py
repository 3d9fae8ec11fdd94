"""Request bodies as the schema states them, one shape for each case whose rules differ (a
reason to reject, the edited arguments to revise), so that every rule of a body's form the API
enforces is in the contract. The API parses each body with its one serializer (serializers.py)
and the service's checks; these shapes only describe it."""

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from agentportal.serializers import (
    InterruptIdField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    TextField,
)
from approvals.models import Decision, PlanDecision
from approvals.plan_serializers import ExchangeItemsField
from approvals.serializers import ArgsDigestField

# A reason or note as the API keeps it: up to 2,000 characters.
NOTE_LENGTH = 2000


@extend_schema_field({"$ref": "#/components/schemas/ToolArguments"})
class ToolArgumentsField(serializers.DictField):
    """A call's arguments as a supervisor edits them; checked against the tool's own schema."""


def decision_bodies(*, name: str, interrupt_id_required: bool) -> PolymorphicProxySerializer:
    """A decision on a pending call: arguments with nothing else, the edited arguments to
    revise, a reason to reject. Checked by `DecisionSerializer` and `decision_validate`."""

    def body(decision: str, **fields) -> type[serializers.Serializer]:
        fields = {
            "interrupt_id": InterruptIdField(required=interrupt_id_required),
            "decision": serializers.ChoiceField(choices=[decision]),
            "reason": StrictCharField(required=False, allow_blank=True, max_length=NOTE_LENGTH),
            "args_digest": ArgsDigestField(),
            **fields,
        }
        return type(f"{decision.capitalize()}{name}", (StrictSerializer,), fields)

    return PolymorphicProxySerializer(
        component_name=name,
        serializers={
            Decision.APPROVE.value: body(Decision.APPROVE.value),
            Decision.REVISE.value: body(Decision.REVISE.value, tool_args=ToolArgumentsField()),
            Decision.REJECT.value: body(
                Decision.REJECT.value, reason=TextField(max_length=NOTE_LENGTH)
            ),
        },
        resource_type_field_name="decision",
    )


def _version() -> StrictIntegerField:
    return StrictIntegerField(min_value=1)


def _optional_note() -> StrictCharField:
    return StrictCharField(required=False, allow_blank=True, max_length=NOTE_LENGTH, default="")


def ticket_decide_bodies() -> PolymorphicProxySerializer:
    """A supervisor's review of a plan: an approval may say why, a rejection must (the agent
    tells the customer). Checked by `TicketDecideSerializer` and `plans.ticket_decide`."""

    def body(decision: str, note) -> type[serializers.Serializer]:
        fields = {
            "proposal_version": _version(),
            "decision": serializers.ChoiceField(choices=[decision]),
            "note": note,
        }
        return type(f"{decision.capitalize()}TicketDecide", (StrictSerializer,), fields)

    return PolymorphicProxySerializer(
        component_name="TicketDecide",
        serializers={
            PlanDecision.APPROVE.value: body(PlanDecision.APPROVE.value, _optional_note()),
            PlanDecision.REJECT.value: body(
                PlanDecision.REJECT.value, TextField(max_length=NOTE_LENGTH)
            ),
        },
        resource_type_field_name="decision",
    )


class TicketChangesRequestSerializer(StrictSerializer):
    """The customer asks for changes: the note says what should change."""

    proposal_version = _version()
    note = TextField(max_length=NOTE_LENGTH)


class TicketRevisionSerializer(StrictSerializer):
    """A supervisor proposes a new version: the edited items, a note if they like."""

    proposal_version = _version()
    note = _optional_note()
    items = ExchangeItemsField()


def ticket_revise_bodies() -> PolymorphicProxySerializer:
    """A revision of a plan: the customer's request for changes or a supervisor's new items
    (which one a caller may send is their role's; the items must fit the ticket's order).
    Checked by `TicketReviseSerializer` and `plans.ticket_revise`."""
    return PolymorphicProxySerializer(
        component_name="TicketRevise",
        serializers=[TicketChangesRequestSerializer, TicketRevisionSerializer],
        resource_type_field_name=None,
    )
