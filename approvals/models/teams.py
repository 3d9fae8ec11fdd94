"""Who decides together: a shop's approver groups ("Finance"), to which a call may be
assigned (approvals.gate.assignment)."""

from django.conf import settings
from django.db import models

from agentportal.models import Merchant


class ApproverGroup(models.Model):
    """People of one shop who take a kind of call: a call assigned to the group is listed
    under "My groups" in each member's inbox. Members who no longer supervise the shop are
    still listed here but decide nothing (the gate asks their role in the shop now)."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="approver_groups")
    name = models.CharField(max_length=64)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="approver_groups", blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "name"], name="approver_group_name_per_shop"
            )
        ]

    def __str__(self) -> str:
        return self.name


class Absence(models.Model):
    """A supervisor away from a shop, from `starts_at` until `ends_at`, naming a colleague
    who takes what would come to them meanwhile: calls assigned to them, and their emails
    about new and escalated calls (approvals.stand_ins)."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="absences")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="absences"
    )
    delegate = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="delegations"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["merchant", "user", "ends_at"], name="absence_now_idx")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")),
                name="absence_ends_after_it_starts",
            ),
            models.CheckConstraint(
                condition=~models.Q(delegate=models.F("user")),
                name="absence_delegate_is_another",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} away {self.starts_at:%Y-%m-%d} to {self.ends_at:%Y-%m-%d}"
