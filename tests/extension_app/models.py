from django.conf import settings
from django.db import models


class Parcel(models.Model):
    """A parcel on its way to one of the shop's customers: what the runtime's own tests ask the
    agent about, so that they need nothing of the after-sales demo."""

    merchant = models.ForeignKey("agentportal.Merchant", on_delete=models.CASCADE)
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    number = models.CharField(max_length=20)
    status = models.CharField(max_length=40, default="in transit")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "number"], name="parcel_number_per_shop")
        ]

    def __str__(self) -> str:
        return self.number
