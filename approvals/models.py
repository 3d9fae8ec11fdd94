"""The shop's data the after-sales agent works on, and the human decisions about it."""

import hashlib
import json
import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models

from agentportal.models import Merchant


class OrderStatus(models.TextChoices):
    PLACED = "PLACED"
    SHIPPED = "SHIPPED"
    DELIVERED = "DELIVERED"
    CANCELLED = "CANCELLED"


class Order(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="orders")
    number = models.CharField(max_length=32)
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders"
    )
    status = models.CharField(max_length=16, choices=OrderStatus.choices)
    # [{"sku", "product", "name", "size", "quantity", "unit_price", "exchangeable"}]
    items = models.JSONField(default=list)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    # ISO 4217: the order's prices, total and refunds are all in this currency.
    currency = models.CharField(max_length=3, default="EUR")
    refunded = models.DecimalField(max_digits=10, decimal_places=2, default=Decimal("0.00"))
    placed_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["merchant", "number"]
        constraints = [
            models.UniqueConstraint(fields=["merchant", "number"], name="order_number_per_shop")
        ]

    def __str__(self) -> str:
        return self.number

    @property
    def refundable(self) -> Decimal:
        return self.total - self.refunded


class StockLevel(models.Model):
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="stock")
    sku = models.CharField(max_length=64)
    quantity = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["merchant", "sku"]
        constraints = [
            models.UniqueConstraint(fields=["merchant", "sku"], name="stock_sku_per_shop")
        ]

    def __str__(self) -> str:
        return f"{self.sku}: {self.quantity}"


class Refund(models.Model):
    """The refund ledger: one row per tool-call key, so a replayed call never pays twice."""

    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="refunds")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    reason = models.CharField(max_length=500, blank=True)
    idempotency_key = models.CharField(max_length=120, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.amount} for {self.order}"


def args_digest(arguments: dict) -> str:
    """What pins one set of a call's arguments: a vote, an approval and the execution name it."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ApprovalStatus(models.TextChoices):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED_EXECUTING = "APPROVED_EXECUTING"
    EXECUTED = "EXECUTED"
    # Carried out, and the tool refused: nothing was done; the tool's reason is the result.
    FAILED = "FAILED", "Failed: the tool refused"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


class CancelCause(models.TextChoices):
    """Why a call or a plan was closed without being carried out: its run ended first."""

    RUN_CANCELLED = "run_cancelled"
    APPROVER_REVOKED = "approver_revoked"
    APPROVAL_MISMATCH = "approval_mismatch"
    RUN_FAILED = "run_failed"
    SNAPSHOT_INVALID = "snapshot_invalid"


class Decision(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    REVISE = "revise"


class ApprovalPolicy(models.Model):
    """A shop's rule for one tool's calls that need approval: which amounts need nobody, which
    need two people, and when an undecided call is escalated. Its rules live in versions
    (ApprovalPolicyVersion) that never change once written, like releases: a pending call
    keeps the version it was created under."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="policies")
    tool_name = models.CharField(max_length=64)
    current = models.ForeignKey(
        "ApprovalPolicyVersion", null=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["merchant", "tool_name"]
        verbose_name_plural = "approval policies"
        constraints = [
            models.UniqueConstraint(fields=["merchant", "tool_name"], name="policy_per_tool")
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} policy of {self.merchant}"


class ApprovalPolicyVersion(models.Model):
    """One version of a policy's rules; an edit writes a new row, never changes one."""

    policy = models.ForeignKey(ApprovalPolicy, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    # Which of the tool's arguments is the amount the thresholds compare with.
    amount_field = models.CharField(max_length=64)
    # Blank: never.
    auto_approve_up_to = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    two_approvers_from = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    escalate_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    escalate_to_operators = models.BooleanField(default=True)
    escalate_to_email = models.EmailField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["policy", "version"]
        constraints = [models.UniqueConstraint(fields=["policy", "version"], name="policy_version")]

    def __str__(self) -> str:
        return f"policy:{self.policy_id}@{self.version}"

    @property
    def label(self) -> str:
        """How an approval names the rule that decided it: `policy:<id>@<version>`."""
        return f"policy:{self.policy_id}@{self.version}"


class Approval(models.Model):
    """A supervisor's work item and the audit record of one sensitive tool call.

    Written in the same transaction as the run's state snapshot and never disagreeing with it.
    Proposed (what the model asked), approved (after a revision) and executed arguments are
    kept apart; the digest pins the approved set.
    """

    interrupt_id = models.CharField(max_length=64, unique=True)
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, related_name="approvals")
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="approvals")
    tool_name = models.CharField(max_length=64)
    tool_execution_key = models.CharField(max_length=120, unique=True)
    proposed_args = models.JSONField()
    approved_args = models.JSONField(null=True, blank=True)
    executed_args = models.JSONField(null=True, blank=True)
    args_digest = models.CharField(max_length=64, blank=True)
    status = models.CharField(
        max_length=20, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING_APPROVAL
    )
    decision = models.CharField(max_length=8, choices=Decision.choices, blank=True)
    reason = models.TextField(blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approval_decisions",
    )
    decided_by_key = models.ForeignKey(
        "agentportal.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    # The policy version the call was created under, and what it asked of the call then: a
    # later edit of the policy never changes these.
    policy_version = models.ForeignKey(
        ApprovalPolicyVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    required_approvals = models.PositiveSmallIntegerField(default=1)
    decided_by_policy = models.BooleanField(default=False)
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    # Why it was CANCELLED: its run ended before the call executed.
    cancel_cause = models.CharField(max_length=20, choices=CancelCause.choices, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["merchant", "status", "-created_at"], name="approval_inbox_idx"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry_idx"),
            models.Index(fields=["status", "escalate_at"], name="approval_escalation_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt_id} {self.tool_name} ({self.status})"

    @property
    def decided_by_name(self) -> str | None:
        if self.decided_by_policy:
            return self.policy_version.label
        if self.decided_by_id:
            return self.decided_by.get_username()
        if self.decided_by_key_id:
            return f"service:{self.merchant.slug}"
        return None

    @property
    def arguments_on_the_table(self) -> dict:
        """What approving the call now approves: a colleague's revision (or approval) waiting
        for another approval, or what the model asked for."""
        return self.approved_args if self.approved_args is not None else self.proposed_args

    @property
    def digest_on_the_table(self) -> str:
        return args_digest(self.arguments_on_the_table)

    @property
    def current_votes(self) -> list["ApprovalVote"]:
        """The approvals that count (or counted) for the arguments on the table: those of the
        last round, which a revision started. Prefetch `votes__user` for many approvals."""
        votes = list(self.votes.all())
        digest = self.args_digest or (votes[-1].args_digest if votes else "")
        return [vote for vote in votes if vote.args_digest == digest]


class ApprovalVote(models.Model):
    """One person's approval of one set of arguments of a call. A call that needs two counts
    the votes for the arguments now on the table (`args_digest`): a revision starts the count
    again, with the reviser's vote as its first."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="votes")
    # Who, as one comparable value: `user:<id>` or `key:<id>`.
    voter = models.CharField(max_length=40)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    api_key = models.ForeignKey(
        "agentportal.ApiKey", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decision = models.CharField(max_length=8, choices=Decision.choices)
    args_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["approval", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "args_digest", "voter"], name="one_vote_per_person"
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision} by {self.voter}"

    @property
    def voter_name(self) -> str:
        if self.user_id:
            return self.user.get_username()
        return f"service:{self.approval.merchant.slug}"


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


class WebhookDelivery(models.Model):
    """The outbox: a webhook written in the transaction of the event it announces, then
    delivered (and retried with backoff) by tasks, never by the request or the run."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField()
    url = models.URLField()
    status = models.CharField(
        max_length=12, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.url} ({self.status})"


class CustomerEmail(models.Model):
    """The customers' outbox: an email written in the transaction of the news it tells, then
    sent by a task. Each attempt is claimed by a conditional UPDATE before sending, so a task
    that runs twice never sends it twice."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="+")
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    # What the email tells, once: a second write of the same news finds this row.
    key = models.CharField(max_length=120, unique=True)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(
        max_length=12, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="customer_email_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} to {self.recipient_id} ({self.status})"


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


class FollowupRequest(models.Model):
    """A colleague's promise to come back to the customer about an order by `due_at`."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="followups")
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="followups")
    note = models.TextField(blank=True)
    due_at = models.DateTimeField()
    idempotency_key = models.CharField(max_length=120, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["due_at"]

    def __str__(self) -> str:
        return f"follow up on {self.order} by {self.due_at:%Y-%m-%d %H:%M}"
