"""Waiting for a customer's answer (DESIGN 6.2): pausing a run for a clarification, and the
input that resumes it, with its receipt. Every write opens its transaction here.

Lock order: Conversation -> AgentRun (run_lock); nothing else is locked.
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field

from agentportal import errors
from runs import services
from runs.extensions import Interrupt, WaitKind, wait_kind
from runs.models import AgentRun, ErrorCode, Node, RunInput, RunStatus, ToolStatus
from runs.services import Lease, StepCommit
from runs.snapshot import SnapshotError, WaitState, interrupt_id_for, wait_parse
from runs.step_protocol import ToolOutcome
from runs.tools import Policy, Tool


class Clarification(BaseModel):
    """What a run asking its customer a question waits with."""

    model_config = ConfigDict(extra="forbid", strict=True)

    question: str = Field(min_length=1)


CLARIFICATION = WaitKind(
    name="clarification",
    payload=Clarification,
    status=RunStatus.WAITING_USER,
    pending_fields={"question": str},
    answers_inputs=True,
)


def wait_pause(
    run: AgentRun,
    *,
    status: str,
    wait: WaitState,
    events: list[tuple[str, dict]],
    on_locked=None,
) -> StepCommit:
    """The step commit that pauses a run at its tools node until a person answers."""
    return StepCommit(
        next_node=Node.TOOLS,
        advance_step=False,
        run_fields=services.wait_fields(run, status=status, wait=wait),
        events=events,
        on_locked=on_locked,
    )


def clarification_interrupt(
    *, run: AgentRun, lease: Lease, tool: Tool, args: BaseModel, key: str
) -> StepCommit | ToolOutcome:
    """The pause of CLARIFICATION_INTERRUPT: ask, or use the answer."""
    arguments = args.model_dump(mode="json")
    interrupt_id = interrupt_id_for(key)
    answer = RunInput.objects.filter(run_id=run.pk, interrupt_id=interrupt_id).first()
    if answer is not None:
        return ToolOutcome(ToolStatus.SUCCEEDED, arguments, {"answer": answer.payload["text"]})
    question = str(arguments.get("question", ""))
    wait = WaitState(
        interrupt_id=interrupt_id,
        kind=CLARIFICATION.name,
        tool_name=tool.name,
        tool_key=key,
        tool_args=arguments,
        payload=Clarification(question=question),
    )
    return wait_pause(
        run,
        status=RunStatus.WAITING_USER,
        wait=wait,
        events=[("input.requested", {"interrupt_id": interrupt_id, "question": question})],
    )


@dataclass(frozen=True)
class InputRequest:
    interrupt_id: str
    run_version: int
    text: str
    idempotency_key: str
    idempotency_scope: str

    def payload_hash(self) -> str:
        return services.request_hash(
            {"interrupt_id": self.interrupt_id, "run_version": self.run_version, "text": self.text}
        )


def _receipt_replay(run_id, request: InputRequest) -> RunInput | None:
    receipt = RunInput.objects.filter(
        run_id=run_id,
        idempotency_scope=request.idempotency_scope,
        idempotency_key=request.idempotency_key,
    ).first()
    if receipt is not None and receipt.request_hash != request.payload_hash():
        raise errors.IdempotencyKeyReused("This Idempotency-Key was used for another input.")
    return receipt


def run_input_accept(
    *, run: AgentRun, request: InputRequest, author: str
) -> tuple[RunInput, AgentRun, bool]:
    """Answer a run's clarification; return the receipt, the run and whether it was created.

    The receipt and the re-queue commit together. A retry with the same key gets the same
    receipt; of concurrent inputs for one wait, one resumes the run.
    """
    receipt = _receipt_replay(run.pk, request)
    if receipt is not None:
        return receipt, run, False
    expired = False
    try:
        with transaction.atomic():
            locked = services.run_lock(run.pk)
            receipt = _receipt_replay(run.pk, request)
            if receipt is not None:
                return receipt, locked, False
            wait = _wait_answerable(locked, request)
            if services.run_wait_expire_locked(locked):
                expired = True
            elif locked.version != request.run_version:
                raise errors.VersionConflict(
                    f"The run is at version {locked.version}, not {request.run_version}.",
                    run_version=locked.version,
                )
            else:
                receipt = input_resume_locked(
                    locked,
                    wait=wait,
                    text=request.text,
                    idempotency_scope=request.idempotency_scope,
                    idempotency_key=request.idempotency_key,
                    request_hash=request.payload_hash(),
                    author=author,
                )
    except IntegrityError:
        # A concurrent input with the same key (or for the same wait) committed first.
        receipt = _receipt_replay(run.pk, request)
        if receipt is None:
            raise errors.NotWaiting("Another input answered this wait first.") from None
        return receipt, AgentRun.objects.get(pk=run.pk), False
    if expired:
        # Committed above: the run failed with WAIT_EXPIRED; only now refuse.
        raise errors.InterruptExpired("The wait expired before this input arrived.")
    return receipt, locked, True


def input_resume_locked(
    run: AgentRun,
    *,
    wait: WaitState,
    text: str,
    idempotency_key: str,
    request_hash: str,
    author: str,
    idempotency_scope: str = "",
) -> RunInput:
    """Store the answer's receipt and put the run back in the queue, in one transaction.
    Call holding the run's lock, after checking that the answer fits the wait."""
    receipt = services.run_input_record_locked(
        run,
        interrupt_id=wait.interrupt_id,
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        kind=wait.kind,
        payload={"text": text},
        request_hash=request_hash,
        created_by=author,
    )
    services.run_resume_locked(
        run,
        events=[
            (
                "input.received",
                {
                    "interrupt_id": wait.interrupt_id,
                    "receipt_id": receipt.pk,
                    "kind": wait.kind,
                    "author": author,
                },
            )
        ],
    )
    return receipt


def clarification_pending_locked(run: AgentRun) -> WaitState | None:
    """The clarification a run waits for and may still be answered, or None. Call holding
    the run's lock."""
    if run.status != RunStatus.WAITING_USER or run.wait_deadline_at is None:
        return None
    if run.wait_deadline_at <= timezone.now():
        return None
    try:
        wait = wait_parse(run.wait_state)
    except SnapshotError:
        return None
    return wait if wait is not None and wait.kind == CLARIFICATION.name else None


def _wait_answerable(run: AgentRun, request: InputRequest) -> WaitState:
    """The run's clarification wait, if this input may answer it (its version is checked
    after its deadline); a problem otherwise. Call holding the run's lock."""
    try:
        wait = wait_parse(run.wait_state)
    except SnapshotError as error:
        raise errors.SnapshotInvalid(f"The run's wait state is unusable: {error}") from None
    expired = run.status == RunStatus.FAILED and run.error_code == ErrorCode.WAIT_EXPIRED
    if expired and wait is not None and wait.interrupt_id == request.interrupt_id:
        raise errors.InterruptExpired("Nobody answered in time; the run has ended.")
    if run.is_finished:
        raise errors.RunFinished(f"The run has ended ({run.status}).")
    if run.status != RunStatus.WAITING_USER or wait is None:
        raise errors.NotWaiting("The run is not waiting for an input.")
    kind = wait_kind(wait.kind)
    if kind is None or not kind.answers_inputs:
        raise errors.NotWaiting(
            kind.input_refusal if kind else "The run is not waiting for an input.",
            **{name: getattr(wait.payload, name) for name in kind.pending_fields},
        )
    if wait.interrupt_id != request.interrupt_id:
        raise errors.InterruptMismatch("That is not what this run is waiting for.")
    return wait


CLARIFICATION_INTERRUPT = Interrupt(
    policy=Policy.CLARIFICATION, pause=clarification_interrupt, kinds=(CLARIFICATION,)
)
