"""Exchange plans: the ticket, its proposals, the customer's confirmations, the supervisors'
reviews and the business events a run reconciles with."""

import uuid

from django.conf import settings
from django.db import models

from agentportal.models import Merchant
from approvals.models.shop import Order


class TicketStatus(models.TextChoices):
    WAITING_CONFIRMATION = "WAITING_CONFIRMATION"
    NEEDS_REVISION = "NEEDS_REVISION"
    WAITING_REVIEW = "WAITING_REVIEW"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"


TICKET_OPEN_STATUSES = (
    TicketStatus.WAITING_CONFIRMATION,
    TicketStatus.NEEDS_REVISION,
    TicketStatus.WAITING_REVIEW,
)


class Ticket(models.Model):
    """An exchange plan: the agent proposes, the customer confirms, a supervisor approves.

    Its current proposal is `version`; every change is a command in approvals.plans that also
    appends a BusinessEvent, which the run then reconciles from.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="tickets")
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, related_name="tickets")
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tickets"
    )
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="tickets")
    # The tool call that proposed it: a replayed step finds the ticket instead of a second one.
    tool_execution_key = models.CharField(max_length=120, unique=True)
    status = models.CharField(
        max_length=24, choices=TicketStatus.choices, default=TicketStatus.WAITING_CONFIRMATION
    )
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["merchant", "status", "-created_at"], name="ticket_inbox_idx"),
        ]

    def __str__(self) -> str:
        return f"ticket {self.id} for {self.order} ({self.status})"


class Proposal(models.Model):
    """One version of a ticket's plan; a revision is a new row, never an edit."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="proposals")
    version = models.PositiveIntegerField()
    # [{"sku", "new_sku", "quantity"}]
    items = models.JSONField(default=list)
    summary = models.TextField()
    note = models.TextField(blank=True)
    # None: the agent proposed it.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["ticket", "version"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "version"], name="proposal_version")
        ]

    def __str__(self) -> str:
        return f"v{self.version}: {self.summary}"


class Confirmation(models.Model):
    """The customer's yes to one proposal version."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="confirmations")
    proposal_version = models.PositiveIntegerField()
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["ticket", "proposal_version"]
        constraints = [
            models.UniqueConstraint(
                fields=["ticket", "proposal_version"], name="confirmation_per_version"
            )
        ]

    def __str__(self) -> str:
        return f"confirmed v{self.proposal_version}"


class PlanDecision(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"


class PlanReview(models.Model):
    """A supervisor's decision on one confirmed proposal version."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="reviews")
    proposal_version = models.PositiveIntegerField()
    decision = models.CharField(max_length=8, choices=PlanDecision.choices)
    note = models.TextField(blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reviewer_key = models.ForeignKey(
        "agentportal.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["ticket", "proposal_version"]
        constraints = [
            models.UniqueConstraint(
                fields=["ticket", "proposal_version"], name="review_per_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision} v{self.proposal_version}"


class BusinessEventKind(models.TextChoices):
    PROPOSED = "proposed"
    CONFIRMED = "confirmed"
    CHANGES_REQUESTED = "changes_requested"
    REVISED = "revised"
    APPROVED = "approved"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class BusinessEvent(models.Model):
    """Append-only: what happened to a ticket. The runtime reconciles its runs from these.

    For one run, ids grow in commit order: the commands that append them hold the ticket's
    lock, and a run has one open ticket at a time.
    """

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="+")
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=BusinessEventKind.choices)
    proposal_version = models.PositiveIntegerField()
    actor = models.CharField(max_length=160)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_key = models.ForeignKey(
        "agentportal.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "id"], name="business_event_run_idx")]

    def __str__(self) -> str:
        return f"{self.kind} v{self.proposal_version} by {self.actor}"
