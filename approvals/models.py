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
