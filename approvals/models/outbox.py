"""What is sent out after a decision: the webhook deliveries and the customers' emails."""

from django.conf import settings
from django.db import models

from agentportal.models import Merchant


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
