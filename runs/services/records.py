"""Rows a domain app writes on a run's behalf, through the runtime rather than around it: the
receipt of what answered a wait, the result of a tool call whose side effect the domain
committed itself, and how far the run has applied the domain's events.

Each is called inside the caller's transaction, holding the run's lock.
"""

from typing import Any

from django.db import transaction

from runs.models import AgentRun, RunInput, ToolExecution


def run_input_record_locked(
    run: AgentRun,
    *,
    interrupt_id: str,
    kind: str,
    idempotency_key: str,
    payload: dict[str, Any],
    created_by: str,
    idempotency_scope: str = "",
    request_hash: str = "",
    source_event_id: int | None = None,
) -> RunInput:
    """The receipt of what answered a run's wait. Unique per (run, key) and per (run, wait):
    a second answer fails with IntegrityError, which the caller turns into its replay."""
    return RunInput.objects.create(
        run=run,
        interrupt_id=interrupt_id,
        idempotency_scope=idempotency_scope,
        idempotency_key=idempotency_key,
        kind=kind,
        payload=payload,
        request_hash=request_hash,
        source_event_id=source_event_id,
        created_by=created_by,
    )


def tool_execution_record_locked(
    run: AgentRun,
    *,
    step: int,
    idempotency_key: str,
    tool: str,
    args: dict[str, Any],
    status: str,
    result: dict[str, Any],
) -> ToolExecution:
    """The result of a call the domain executed itself, in the transaction that commits its
    side effect; the worker then reuses it and never runs the call again."""
    return ToolExecution.objects.create(
        run_id=run.pk,
        step=step,
        index=int(idempotency_key.rsplit(":", 1)[1]),
        idempotency_key=idempotency_key,
        tool=tool,
        args=args,
        status=status,
        result=result,
    )


def run_event_cursor_move_locked(run: AgentRun, *, event_id: int) -> None:
    """Record that the run has applied the domain's events up to `event_id`, decided by a
    conditional UPDATE on the cursor read under the lock."""
    moved = AgentRun.objects.filter(pk=run.pk, domain_event_cursor=run.domain_event_cursor).update(
        domain_event_cursor=event_id
    )
    if moved != 1:
        raise transaction.TransactionManagementError(f"run {run.pk} changed under its lock")
    run.domain_event_cursor = event_id
