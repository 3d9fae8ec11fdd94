"""The REST representations of exchange plans (tickets): a plan, its proposals, the
customer's confirmation and the supervisor's review, and the bodies that answer them."""

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from pydantic import TypeAdapter
from rest_framework import serializers

from agentportal.serializers import (
    NOT_BLANK,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
)
from approvals.models import PlanDecision, Ticket, TicketStatus
from approvals.plans.exchange_items import ExchangeItems


class ExchangeItemSerializer(serializers.Serializer):
    sku = serializers.CharField()
    new_sku = serializers.CharField()
    quantity = serializers.IntegerField()


class ProposalSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    items = ExchangeItemSerializer(many=True)
    summary = serializers.CharField()
    note = serializers.CharField(allow_blank=True)


class ConfirmationSerializer(serializers.Serializer):
    proposal_version = serializers.IntegerField()
    confirmed_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class ReviewSerializer(serializers.Serializer):
    proposal_version = serializers.IntegerField()
    decision = serializers.ChoiceField(PlanDecision.choices)
    note = serializers.CharField(allow_blank=True)
    reviewed_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class TicketSerializer(serializers.ModelSerializer):
    run_id = serializers.UUIDField()
    order_id = serializers.CharField(source="order.number")
    status = serializers.ChoiceField(TicketStatus.values)
    proposal = serializers.SerializerMethodField()
    confirmation = serializers.SerializerMethodField()
    review = serializers.SerializerMethodField()

    class Meta:
        model = Ticket
        fields = [
            "id",
            "run_id",
            "order_id",
            "status",
            "proposal",
            "confirmation",
            "review",
            "created_at",
            "updated_at",
        ]

    @extend_schema_field(ProposalSerializer)
    def get_proposal(self, ticket: Ticket) -> dict:
        proposal = next(p for p in ticket.proposals.all() if p.version == ticket.version)
        return ProposalSerializer(proposal).data

    @extend_schema_field(ConfirmationSerializer(allow_null=True))
    def get_confirmation(self, ticket: Ticket) -> dict | None:
        confirmation = _current(ticket.confirmations.all(), ticket.version)
        if confirmation is None:
            return None
        return {
            "proposal_version": confirmation.proposal_version,
            "confirmed_by": confirmation.customer.get_username(),
            "created_at": confirmation.created_at,
        }

    @extend_schema_field(ReviewSerializer(allow_null=True))
    def get_review(self, ticket: Ticket) -> dict | None:
        review = _current(ticket.reviews.all(), ticket.version)
        if review is None:
            return None
        principal = self.context.get("principal")
        if principal is not None and principal.is_customer:
            # A customer reads who reviewed as the shop's staff, never by login name.
            reviewer = settings.AGENTPORTAL["STAFF_DISPLAY_NAME"]
        else:
            reviewer = review.reviewer.get_username() if review.reviewer else "service"
        return ReviewSerializer(
            {
                "proposal_version": review.proposal_version,
                "decision": review.decision,
                "note": review.note,
                "reviewed_by": reviewer,
                "created_at": review.created_at,
            }
        ).data


class TicketPageSerializer(serializers.Serializer):
    results = TicketSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class TicketConfirmSerializer(StrictSerializer):
    proposal_version = StrictIntegerField(min_value=1)


def _exchange_items_schema() -> dict:
    """The tool's own schema of the lines, with its one definition inlined (OpenAPI 3.0 has no
    `$defs`)."""
    schema = TypeAdapter(ExchangeItems).json_schema()
    schema["items"] = schema.pop("$defs")["ExchangeItem"]
    # The tool strips blanks before it checks a length: a SKU of blanks is none.
    for name in ("sku", "new_sku"):
        schema["items"]["properties"][name]["pattern"] = NOT_BLANK.regex.pattern
    return schema


@extend_schema_field(_exchange_items_schema())
class ExchangeItemsField(serializers.JSONField):
    """The edited lines of a plan, checked against the order by the service."""


class TicketReviseSerializer(StrictSerializer):
    proposal_version = StrictIntegerField(min_value=1)
    note = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")
    items = ExchangeItemsField(required=False)


class TicketDecideSerializer(StrictSerializer):
    proposal_version = StrictIntegerField(min_value=1)
    decision = serializers.ChoiceField(choices=PlanDecision.choices)
    note = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")


def _current(rows, version: int):
    """The row of the ticket's current proposal version among prefetched ones."""
    return next((row for row in rows if row.proposal_version == version), None)
