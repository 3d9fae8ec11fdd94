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
