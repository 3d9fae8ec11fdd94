"""The decision record: every step of a gated call (asked for, approved, revised, decided by a
policy, escalated, executed, refused, rejected, expired, cancelled), one shop's entries chained
by their hashes (approvals.audit.chain). Entries name runs and calls by their ids, never by a
foreign key: pruning runs never touches the record."""

from django.db import models

from agentportal.models import Merchant


class RecordKind(models.TextChoices):
    REQUESTED = "requested"
    APPROVED = "approved"
    REVISED = "revised"
    POLICY_APPROVED = "policy_approved"
    REJECTED = "rejected"
    ESCALATED = "escalated"
    EXECUTED = "executed"
    REFUSED = "refused"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class ActorKind(models.TextChoices):
    # A supervisor or operator, signed in or by their key.
    PERSON = "person"
    SERVICE_KEY = "service_key"
    POLICY = "policy"
    # The model asked for the call.
    AGENT = "agent"
    # The runtime itself: an expiry, a run's end, the worker executing.
    SYSTEM = "system"


class DecisionRecord(models.Model):
    """One entry. Written in the transaction of what it records, unchained (`seq` null); the
    chain's sealer then gives it its place, `seq`, with the hash of the entry before it and
    its own, and never changes it again."""

    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, choices=RecordKind.choices)
    run_id = models.UUIDField()
    interrupt_id = models.CharField(max_length=64)
    tool_name = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    args_digest = models.CharField(max_length=64, blank=True)
    # The digest of the arguments the decider said they saw (blank: they named none).
    seen_digest = models.CharField(max_length=64, blank=True)
    actor_kind = models.CharField(max_length=12, choices=ActorKind.choices)
    # Who: a username, `key:<id>`, `policy:<id>@<version>`, `agent` or `system`.
    actor = models.CharField(max_length=160)
    via = models.CharField(max_length=16, blank=True)
    justification = models.TextField(blank=True)
    at = models.DateTimeField()
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "seq"], name="record_seq_per_shop")
        ]
        indexes = [
            models.Index(fields=["merchant", "at"], name="record_at_idx"),
            # What the sealer looks for: the entries not chained yet, few at any time.
            models.Index(
                fields=["merchant", "id"],
                condition=models.Q(seq__isnull=True),
                name="record_unsealed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.interrupt_id} by {self.actor}"


class RecordChain(models.Model):
    """A shop's chain: where it ends (the last sealed entry), and where it starts after an
    archive took its oldest entries away (their last seq and hash)."""

    merchant = models.OneToOneField(Merchant, on_delete=models.PROTECT, related_name="+")
    last_seq = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, blank=True)
    archived_seq = models.PositiveBigIntegerField(default=0)
    archived_hash = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"record of {self.merchant_id} to {self.last_seq}"
