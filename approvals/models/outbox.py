"""The outbox: everything the portal sends out (signed webhooks, emails to supervisors,
operators and customers) is written as a Delivery in the transaction of the news it tells,
then sent, retried with backoff, by tasks."""

from django.db import models

from agentportal.models import Merchant


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


class Transport(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"


class Delivery(models.Model):
    """One message to one recipient (a webhook's URL or an email address). Each attempt is
    claimed by a conditional UPDATE before sending, so a task that runs twice never sends it
    twice; the sending happens outside any transaction."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="deliveries")
    transport = models.CharField(max_length=12, choices=Transport.choices)
    # What it tells: the webhook's event, or the email's (approval.requested, customer.decision).
    event = models.CharField(max_length=40)
    # The news told at most once: a second write of it finds this row (null: no such rule).
    key = models.CharField(max_length=160, unique=True, null=True, blank=True)
    recipient = models.CharField(max_length=500)
    subject = models.CharField(max_length=200, blank=True)
    # A webhook's JSON body; an email's {"body": text}.
    payload = models.JSONField()
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
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="outbox_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} by {self.transport} to {self.recipient} ({self.status})"
