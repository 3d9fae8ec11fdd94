"""The agent runtime's data: runs, their timeline, model attempts, tool executions, releases."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agentportal.models import Merchant
from runs.snapshot import SnapshotError, WaitState, wait_parse


class RunStatus(models.TextChoices):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    WAITING_USER = "WAITING_USER"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    # Left to an operator after an unexpected error: holds no capacity and no open-run slot.
    PARKED = "PARKED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


ACTIVE_STATUSES = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING_USER,
    RunStatus.WAITING_APPROVAL,
)
FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class Node(models.TextChoices):
    LOAD = "load"
    MODEL = "model"
    TOOLS = "tools"
    FOLLOWUP = "followup"
    DONE = "done"
    WAIT = "wait"


class ErrorCode(models.TextChoices):
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    WAIT_EXPIRED = "WAIT_EXPIRED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    MODEL_ERROR = "MODEL_ERROR"
    TOOL_ERROR = "TOOL_ERROR"
    APPROVER_REVOKED = "APPROVER_REVOKED"
    APPROVAL_MISMATCH = "APPROVAL_MISMATCH"
    PERMISSION_REVOKED = "PERMISSION_REVOKED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class ConversationStatus(models.TextChoices):
    OPEN = "OPEN"
    TAKEN_OVER = "TAKEN_OVER"
    CLOSED = "CLOSED"


class Conversation(models.Model):
    """A customer's chat with the agent: at most one active run at a time, a queue of the
    messages sent meanwhile, and the control commands' counters."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="conversations")
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="conversations"
    )
    status = models.CharField(
        max_length=12, choices=ConversationStatus.choices, default=ConversationStatus.OPEN
    )
    # Set and cleared only by conditional updates.
    active_run = models.ForeignKey(
        "runs.AgentRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Bumped by /takeover: a worker holding an older value can commit nothing more.
    control_version = models.PositiveIntegerField(default=1)
    # Bumped by /new and /reset: queued messages of an older generation never run, and the
    # agent's context holds only the current generation's.
    queue_generation = models.PositiveIntegerField(default=1)
    # When the customer last made it their current conversation (created, or /switch).
    current_since = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"conversation {self.id} ({self.status})"


class MessageStatus(models.TextChoices):
    STARTED = "STARTED"
    QUEUED = "QUEUED"
    HELD = "HELD"
    CANCELLED = "CANCELLED"


class ConversationMessage(models.Model):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    text = models.TextField()
    status = models.CharField(max_length=12, choices=MessageStatus.choices)
    generation = models.PositiveIntegerField()
    run = models.ForeignKey(
        "runs.AgentRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "created_at", "pk"]
        indexes = [
            models.Index(fields=["conversation", "status", "created_at"], name="message_queue_idx")
        ]

    def __str__(self) -> str:
        return f"{self.status}: {self.text[:40]}"


class AgentRun(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    merchant = models.ForeignKey(Merchant, on_delete=models.PROTECT, related_name="runs")
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agent_runs"
    )
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    next_node = models.CharField(max_length=16, choices=Node.choices, default=Node.LOAD)
    step = models.PositiveIntegerField(default=0)
    messages = models.JSONField(default=list)
    graph_version = models.CharField(max_length=64)
    release_snapshot = models.JSONField(default=dict)
    state_snapshot = models.JSONField(null=True, blank=True)
    # What a run waiting for people waits for, unless its interrupt keeps that itself (a
    # tool-call approval keeps the state snapshot): a runs.snapshot.WaitState of a registered
    # wait kind.
    wait_state = models.JSONField(null=True, blank=True)
    # The id of the last of the domain's events about this run that it has applied (the domain
    # keeps the events; runs.services.run_event_cursor_move_locked moves this).
    domain_event_cursor = models.PositiveBigIntegerField(default=0)
    # Bumped on every change a client can see; inputs name it to refuse stale writes.
    version = models.PositiveIntegerField(default=1)
    lease_token = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The worker process that took the lease (its heartbeat's name), so that its runs are
    # handed back as soon as it is known to be dead, before their leases expire.
    lease_holder = models.CharField(max_length=160, blank=True, default="")
    control_version = models.PositiveIntegerField(default=1)
    deadline_at = models.DateTimeField(null=True, blank=True)
    wait_deadline_at = models.DateTimeField(null=True, blank=True)
    model_calls = models.PositiveIntegerField(default=0)
    last_event_seq = models.PositiveIntegerField(default=0)
    idempotency_scope = models.CharField(max_length=64, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 (NULL: no key; the unique constraint skips it)
    request_hash = models.CharField(max_length=64, blank=True)
    result = models.TextField(null=True, blank=True)  # noqa: DJ001 (the API says null until finished)
    error_code = models.CharField(max_length=32, choices=ErrorCode.choices, blank=True)
    error_detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_scope", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="run_idempotency_key",
            )
        ]
        indexes = [
            models.Index(fields=["status", "merchant", "created_at"], name="run_claim_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="run_lease_idx"),
            models.Index(fields=["merchant", "account", "status"], name="run_account_idx"),
            models.Index(fields=["merchant", "-created_at"], name="run_merchant_recent_idx"),
            models.Index(fields=["status", "wait_deadline_at"], name="run_wait_deadline_idx"),
            # `prune` walks the runs in this order, a batch at a time: without it each batch
            # sorted every finished run older than the cutoff (4.2x from 100k runs to 1M).
            models.Index(fields=["created_at", "id"], name="run_created_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def wait(self) -> WaitState | None:
        """What the run waits for a person to answer; None when it waits for nothing, or when
        its stored wait is unusable (an operator's case, never an error on a page)."""
        if self.status not in (RunStatus.WAITING_USER, RunStatus.WAITING_APPROVAL):
            return None
        try:
            return wait_parse(self.wait_state)
        except SnapshotError:
            return None


class RunEvent(models.Model):
    """The append-only timeline of a run; seq comes from the locked run's counter."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_seq")]

    def __str__(self) -> str:
        return f"{self.seq} {self.type}"


class AttemptStatus(models.TextChoices):
    """What became of one model call. Every attempt counts against the run's model calls
    (`AgentRun.model_calls`), whatever became of it.

    STARTED: recorded before the call is sent; in flight, or its worker was lost.
    RESPONDED: the answer came, with its usage and latency. So too when the run was stopped,
    taken over or lost (its lease expired, its access revoked) while the model answered: the
    attempt records what the call cost, and nothing else of the answer is committed.
    FAILED: the model answered with an error, or not in time.
    ABANDONED: the worker gave the call up before its answer came, because the run was
    stopped, taken over or lost meanwhile; its usage is not known.
    UNKNOWN: a new lease holder found the attempt still STARTED; it may have reached the
    model, and the model is asked again.

    An attempt leaves STARTED once, by a conditional UPDATE: the first outcome recorded stays.
    """

    STARTED = "STARTED"
    RESPONDED = "RESPONDED"
    UNKNOWN = "UNKNOWN"
    FAILED = "FAILED"
    ABANDONED = "ABANDONED"


class ModelAttempt(models.Model):
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="model_attempts")
    step = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=AttemptStatus.choices)
    usage = models.JSONField(default=dict)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "step", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step", "attempt"], name="model_attempt_unique")
        ]

    def __str__(self) -> str:
        return f"step {self.step} attempt {self.attempt} ({self.status})"


class ToolStatus(models.TextChoices):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class ToolExecution(models.Model):
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="tool_executions")
    step = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    # agent:{run_id}:{step}:{index}: the same call of the same step always has the same key.
    idempotency_key = models.CharField(max_length=120, unique=True)
    tool = models.CharField(max_length=64)
    args = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=ToolStatus.choices)
    result = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step", "index"]

    def __str__(self) -> str:
        return f"{self.tool} {self.idempotency_key} ({self.status})"


class RunInput(models.Model):
    """The receipt of what resumed a waiting run: a customer's answer, or a domain's event.

    One per (run, principal's key) and one per (run, interrupt): a retried or concurrent
    input finds the first one's receipt, and no wait is answered twice.
    """

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="inputs")
    interrupt_id = models.CharField(max_length=64)
    # Whose key it is (Principal.scope): keys are scoped per principal. Empty for receipts the
    # system writes, whose keys hold a space no client key may.
    idempotency_scope = models.CharField(max_length=64, blank=True)
    idempotency_key = models.CharField(max_length=255)
    kind = models.CharField(max_length=20)
    payload = models.JSONField(default=dict)
    request_hash = models.CharField(max_length=64, blank=True)
    # The domain's event that resumed the run, if one did (see domain_event_cursor).
    source_event_id = models.PositiveBigIntegerField(null=True, blank=True)
    created_by = models.CharField(max_length=160, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "idempotency_scope", "idempotency_key"], name="input_key_per_run"
            ),
            models.UniqueConstraint(fields=["run", "interrupt_id"], name="input_per_interrupt"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for {self.interrupt_id}"


class AgentRelease(models.Model):
    """A merchant's agent configuration; runs copy the published one when they are queued."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="releases")
    version = models.PositiveIntegerField()
    graph_version = models.CharField(max_length=64)
    manifest = models.JSONField(default=dict)
    published = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["merchant", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["merchant", "version"], name="release_version"),
            models.UniqueConstraint(
                fields=["merchant"], condition=Q(published=True), name="release_one_published"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.merchant} v{self.version} ({self.graph_version})"


class WorkerHeartbeat(models.Model):
    """The maintenance sweeps' beat ("worker"), and each worker process's while it executes
    runs ("process:<host>:<pid>", with what it holds in `report`)."""

    name = models.CharField(max_length=120, primary_key=True)
    seen_at = models.DateTimeField()
    report = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.seen_at:%H:%M:%S}"
