"""Deciding a call from an email: each supervisor's email carries two links of their own
(approvals.notify.notifications writes them), approve the arguments it showed or reject.
Following one decides nothing; the page it opens asks to confirm, and confirming decides as
that person, by their role in the shop now, recorded `via: "email_link"`. A link is used once,
and decides nothing once its call was decided, changed, reassigned to others or expired, or
its person's role went.
"""

from django.utils import timezone

from agentportal import errors
from agentportal.selectors import principal_for_user
from approvals.gate import services
from approvals.gate.decision_request import DecisionRequest
from approvals.gate.quorum import approve_refusal
from approvals.models import Approval, ApprovalStatus, Decision, DecisionLink
from runs.models import AgentRun


def decision_link_read(*, token: str) -> DecisionLink:
    """The link a token names, with its call and person; NotFound for a token this site did
    not sign (mistyped, cut by a mail client, or forged)."""
    pk = DecisionLink.pk_of(token)
    link = (
        DecisionLink.objects.select_related(
            "user",
            "approval__merchant",
            "approval__run",
            "approval__assigned_user",
            "approval__assigned_group",
        )
        .filter(pk=pk)
        .first()
        if pk is not None
        else None
    )
    if link is None:
        raise errors.NotFound(
            "This link is not one of ours, or it was cut short: open the call from the "
            "portal's inbox instead."
        )
    return link


def decision_link_refusal(link: DecisionLink) -> str:
    """Why following the link now would decide nothing, in the person's words; "" when it
    still can. A read: deciding checks again under the call's locks."""
    approval = link.approval
    if link.used_at is not None:
        return f"You used this link on {link.used_at:%Y-%m-%d %H:%M} UTC; it decides nothing more."
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING_APPROVAL and timezone.now() >= link.expires_at
    ):
        return "This call expired before a decision; nothing was done."
    if approval.status == ApprovalStatus.CANCELLED:
        return "The customer's request ended before a decision; nothing was done."
    if approval.status != ApprovalStatus.PENDING_APPROVAL:
        when = f"{approval.decided_at:%Y-%m-%d %H:%M} UTC" if approval.decided_at else "earlier"
        return f"{approval.decided_by_name or 'Someone'} decided this call already ({when})."
    if approval.digest_on_the_table != link.args_digest:
        return (
            "The call's arguments changed after this email was sent: open the call in the "
            "portal to see them before deciding."
        )
    if _reassigned_away(link, approval):
        return (
            f"This call was assigned to {approval.assigned_name} after this email was sent: "
            "open it in the portal to decide."
        )
    principal = principal_for_user(user=link.user, merchant=approval.merchant)
    if not link.user.is_active or principal is None or not principal.can_supervise:
        return (
            f"You no longer decide calls for {approval.merchant.name}: this link decides nothing."
        )
    if link.decision == Decision.APPROVE:
        return approve_refusal(approval=approval, user=link.user)
    return ""


def _reassigned_away(link: DecisionLink, approval: Approval) -> bool:
    """Whether the call went to someone else (not the link's person, nor a group of theirs)
    after the link was sent: the email's routing no longer holds."""
    return (
        approval.is_assigned
        and approval.assigned_at > link.created_at
        and not approval.assigned_to(link.user)
    )


def decision_link_decide(*, link: DecisionLink, reason: str = "") -> tuple[AgentRun, Approval]:
    """Decide the link's call as its person: their decision on the arguments the email showed.
    Raises the gate's refusals (someone decided first, the call expired, the arguments
    changed, the role went), and AlreadyDecided for a link used already."""
    principal = principal_for_user(user=link.user, merchant=link.approval.merchant)
    if not link.user.is_active or principal is None or not principal.can_supervise:
        raise errors.NotAllowed(
            f"You no longer decide calls for {link.approval.merchant.name}: this link decides "
            "nothing."
        )

    def claim(approval: Approval) -> None:
        # Holding the run's and the call's locks: a second click of the link waits for the
        # first to commit, then finds it used (or the call decided).
        if approval.digest_on_the_table != link.args_digest:
            raise errors.ArgumentsChanged(
                "The call's arguments changed after this email was sent.",
                tool_args=approval.arguments_on_the_table,
                args_digest=approval.digest_on_the_table,
            )
        if _reassigned_away(link, approval):
            raise errors.InvalidTransition("The call was reassigned after this email was sent.")
        now = timezone.now()
        if not DecisionLink.objects.filter(pk=link.pk, used_at__isnull=True).update(used_at=now):
            raise errors.AlreadyDecided(
                "You used this link already; it decides nothing more.",
                decided_by=link.user.get_username(),
                decided_at=None,
                decision=link.decision,
            )

    return services.approval_decide(
        run=link.approval.run,
        principal=principal,
        request=DecisionRequest(
            interrupt_id=link.approval.interrupt_id,
            decision=link.decision,
            reason=reason,
            args_digest=link.args_digest,
            via="email_link",
        ),
        before_deciding=claim,
    )
