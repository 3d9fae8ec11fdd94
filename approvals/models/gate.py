"""Tool calls waiting for people: the approvals, their votes, and the shops' approval policies
with their versions."""

import hashlib
import json

from django.conf import settings
from django.core import signing
from django.db import models

from agentportal.models import Merchant
from approvals.models.teams import ApproverGroup


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
    # The shorthand of one band (two people of any group from this amount), as it was given;
    # the bands below are what the gate reads.
    two_approvers_from = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    # How many people of which group a call needs by its amount (approvals.gate.bands):
    # `[{"from": "200.00"|null, "approvals": 2, "group": "Finance"|null}, ...]`.
    approver_bands = models.JSONField(default=list, blank=True)
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
    # The approver group whose members approve the arguments on the table; blank: any
    # supervisor of the shop.
    required_group = models.CharField(max_length=64, blank=True)
    decided_by_policy = models.BooleanField(default=False)
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    # Who is on it (approvals.gate.assignment): a supervisor or a group of the shop, or nobody.
    assigned_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    assigned_group = models.ForeignKey(
        ApproverGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="approvals"
    )
    assigned_at = models.DateTimeField(null=True, blank=True)
    # When a supervisor first opened the call (its page, or over the API as a person).
    first_seen_at = models.DateTimeField(null=True, blank=True)
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
        constraints = [
            models.CheckConstraint(
                condition=models.Q(assigned_user__isnull=True)
                | models.Q(assigned_group__isnull=True),
                name="approval_assigned_to_one",
            )
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
    def is_assigned(self) -> bool:
        """Someone is on the call (its person or group may since have been deleted, which
        leaves `assigned_at` behind)."""
        return bool(self.assigned_user_id or self.assigned_group_id)

    @property
    def assigned_name(self) -> str:
        """Who is on the call: a supervisor's username, a group's name, or ""."""
        if self.assigned_group_id:
            return self.assigned_group.name
        if self.assigned_user_id:
            return self.assigned_user.get_username()
        return ""

    def assigned_to(self, user) -> bool:
        """Whether the call is assigned to `user`, or to a group of theirs."""
        if self.assigned_user_id:
            return self.assigned_user_id == user.pk
        return (
            bool(self.assigned_group_id) and self.assigned_group.members.filter(pk=user.pk).exists()
        )

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


class DecisionLink(models.Model):
    """One decision, by one person, on one call's arguments, offered by email: following it
    asks the person to confirm, and confirming decides as them (their role now). The link's
    token is signed from the row's key (approvals.gate.decision_links) and never stored; a link
    is used at most once and no longer than its call waits."""

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="links")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    # The arguments the email showed: a revision since makes the link decide nothing.
    args_digest = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(decision__in=["approve", "reject"]),
                name="link_approves_or_rejects",
            )
        ]

    def __str__(self) -> str:
        return f"{self.decision} {self.approval_id} by user {self.user_id}"

    @property
    def token(self) -> str:
        """What the email's link carries: the row's key, signed (URL-safe)."""
        return _link_signer().sign(str(self.pk))

    @classmethod
    def pk_of(cls, token: str) -> int | None:
        """The key a token was signed from; None for a token this site did not sign."""
        try:
            return int(_link_signer().unsign(token))
        except (signing.BadSignature, ValueError):
            return None


def _link_signer() -> signing.Signer:
    # "." is outside the signature's URL-safe alphabet: the token is one path segment.
    return signing.Signer(salt="approvals.decision-link", sep=".")
