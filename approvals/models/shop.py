"""The shop's data the after-sales agent works on: orders, stock, refunds and the colleagues'
follow-ups."""

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
