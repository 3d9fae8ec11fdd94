"""Writing the decision record: one entry per step of a gated call, in the transaction of the
step it records (an INSERT, nothing locked: the chain is sealed afterwards, off the call's
path, by approvals.audit.chain)."""

from typing import Any

from django.utils import timezone

from agentportal.principals import Principal
from approvals.models import ActorKind, Approval, DecisionRecord, RecordKind, args_digest


def record_append(**entry) -> DecisionRecord:
    """Record one step of a call (the arguments of `record_entry`). Call inside the
    transaction that makes the step."""
    made = record_entry(**entry)
    made.save(force_insert=True)
    return made


def record_entry(
    *,
    approval: Approval,
    kind: RecordKind,
    arguments: dict[str, Any] | None = None,
    principal: Principal | None = None,
    actor: tuple[ActorKind, str] | None = None,
    seen_digest: str | None = None,
    via: str = "",
    justification: str = "",
) -> DecisionRecord:
    """An entry, not yet written, of one step of `approval`'s call: what it did with
    `arguments` (the ones on the table unless given). Who: the principal who acted, or
    `actor` (the policy, the agent; the system when neither is given)."""
    if principal is not None:
        actor = _principal_actor(principal)
    shown = arguments if arguments is not None else approval.arguments_on_the_table
    return DecisionRecord(
        merchant_id=approval.merchant_id,
        kind=kind,
        run_id=approval.run_id,
        interrupt_id=approval.interrupt_id,
        tool_name=approval.tool_name,
        arguments=shown,
        args_digest=args_digest(shown),
        seen_digest=seen_digest or "",
        actor_kind=actor[0] if actor else ActorKind.SYSTEM,
        actor=actor[1] if actor else "system",
        via=via,
        justification=justification,
        at=timezone.now(),
    )


def _principal_actor(principal: Principal) -> tuple[ActorKind, str]:
    if principal.user is not None:
        return ActorKind.PERSON, principal.user.get_username()
    return ActorKind.SERVICE_KEY, f"key:{principal.api_key.pk}"


AGENT = (ActorKind.AGENT, "agent")


def policy_actor(approval: Approval) -> tuple[ActorKind, str]:
    return ActorKind.POLICY, approval.policy_version.label
