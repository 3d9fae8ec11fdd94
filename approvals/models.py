"""The shop's data the after-sales agent works on, and the human decisions about it."""

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


class ApprovalStatus(models.TextChoices):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED_EXECUTING = "APPROVED_EXECUTING"
    EXECUTED = "EXECUTED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


class Decision(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    REVISE = "revise"


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
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["merchant", "status", "-created_at"], name="approval_inbox_idx"),
            models.Index(fields=["status", "expires_at"], name="approval_expiry_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt_id} {self.tool_name} ({self.status})"

    @property
    def decided_by_name(self) -> str | None:
        if self.decided_by_id:
            return self.decided_by.get_username()
        if self.decided_by_key_id:
            return f"service:{self.merchant.slug}"
        return None


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
