"""Who is on a call: a call waiting for a decision can be assigned to a supervisor or an
approver group of its shop, or claimed by a supervisor ("I'm on it"). Assignment routes a
call; it never restricts it: any supervisor the policy allows may still decide. Emailed
decision links of others stop deciding once a call is reassigned (approvals.gate.decision_links).
"""

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agentportal import errors
from agentportal.principals import Principal
from agentportal.problems import iso_z
from agentportal.selectors import principal_for_user
from approvals import locks
from approvals.models import Approval, ApprovalStatus, ApproverGroup
from approvals.stand_ins import stand_in_for
from runs import services as run_services
from runs.locks import merchant_lock, run_lock


@dataclass(frozen=True)
class Assignee:
    """A person or a group of the call's shop; neither means "nobody"."""

    user: User | None = None
    group: ApproverGroup | None = None

    def of(self, approval: Approval) -> bool:
        return (approval.assigned_user_id, approval.assigned_group_id) == (
            self.user.pk if self.user else None,
            self.group.pk if self.group else None,
        )


NOBODY = Assignee()


def assignee_find(*, merchant, username: str | None = None, group: str | None = None) -> Assignee:
    """The person (by username) or the group (by name) of the shop a call may be assigned
    to; InvalidInput naming the field for anyone else, or for both at once."""
    if username and group:
        raise errors.InvalidInput(
            "Assign a call to a person or to a group, not both.",
            errors=[{"field": "group", "message": "Give a person or a group, not both."}],
        )
    if group:
        found = ApproverGroup.objects.filter(merchant=merchant, name=group).first()
        if found is None:
            raise errors.InvalidInput(
                f"{merchant.name} has no approver group named {group!r}.",
                errors=[{"field": "group", "message": "No such group in this shop."}],
            )
        return Assignee(group=found)
    if username:
        user = User.objects.filter(username=username).first()
        principal = principal_for_user(user=user, merchant=merchant) if user else None
        if principal is None or not principal.can_supervise:
            raise errors.InvalidInput(
                f"{username!r} does not supervise {merchant.name}: only its supervisors take "
                "its calls.",
                errors=[{"field": "user", "message": "Not a supervisor of this shop."}],
            )
        return Assignee(user=user)
    return NOBODY


def assignee_named(*, merchant, name: str) -> Assignee:
    """The group of the shop called `name`, else its supervisor of that username; NOBODY
    for a blank name (one box in the admin)."""
    name = name.strip()
    if ApproverGroup.objects.filter(merchant=merchant, name=name).exists():
        return assignee_find(merchant=merchant, group=name)
    return assignee_find(merchant=merchant, username=name or None)


def approval_assign(
    *, approval: Approval, principal: Principal, assignee: Assignee, claim: bool = False
) -> Approval:
    """Assign a pending call to `assignee` (NOBODY unassigns; a person away from the shop
    means their stand-in), or with `claim` take it for the principal, which a colleague's
    claim or assignment refuses (take it over by assigning it instead). Adds
    `approval.assigned` to the run's timeline; assigning it to whom it is assigned already
    changes nothing. Two at once: the second waits for the first's lock and decides on what
    it wrote."""
    if principal.merchant.pk != approval.merchant_id:
        raise errors.NotFound("No such call in this shop.")
    if not (principal.can_supervise or principal.is_service):
        raise errors.NotAllowed("Only supervisors and service keys assign calls.")
    if claim and (principal.user is None or not principal.can_supervise):
        raise errors.NotAllowed("A supervisor claims a call, for themselves.")
    stands_in = False
    if claim:
        assignee = Assignee(user=principal.user)
    elif assignee.user is not None:
        # Someone away from the shop gets nothing meanwhile: their stand-in does.
        stand_in = stand_in_for(merchant=approval.merchant, user=assignee.user)
        assignee, stands_in = Assignee(user=stand_in.user), stand_in.delegated
    with transaction.atomic():
        run = run_lock(approval.run_id)
        locked = locks.approval_lock(pk=approval.pk)
        _refuse_unless_pending(locked)
        if assignee.of(locked):
            return locked
        if claim and (locked.assigned_user_id or locked.assigned_group_id):
            holder = (
                f"The group {locked.assigned_name}"
                if locked.assigned_group_id
                else locked.assigned_name
            )
            raise errors.InvalidTransition(
                f"{holder} took this call at {locked.assigned_at:%H:%M} UTC: ask them, or "
                "assign it to yourself to take it over.",
                assigned_to=locked.assigned_name,
                assigned_at=iso_z(locked.assigned_at),
            )
        now = timezone.now() if assignee != NOBODY else None
        moved = Approval.objects.filter(
            pk=locked.pk,
            status=ApprovalStatus.PENDING_APPROVAL,
            assigned_user=locked.assigned_user_id,
            assigned_group=locked.assigned_group_id,
        ).update(
            assigned_user=assignee.user,
            assigned_group=assignee.group,
            assigned_at=now,
            updated_at=timezone.now(),
        )
        if moved != 1:
            raise transaction.TransactionManagementError("approval changed under its lock")
        locked.assigned_user, locked.assigned_group, locked.assigned_at = (
            assignee.user,
            assignee.group,
            now,
        )
        run_services.run_events_append_locked(
            run,
            events=[
                (
                    "approval.assigned",
                    {
                        "interrupt_id": locked.interrupt_id,
                        # Staff are named to customers as staff (the run's events are theirs
                        # to read too); a group by its name.
                        "to": "group" if assignee.group else "person" if assignee.user else None,
                        "group": assignee.group.name if assignee.group else None,
                        "claimed": claim,
                        "stands_in": stands_in,
                        "by": principal.public_name,
                    },
                )
            ],
        )
    return locked


def _refuse_unless_pending(approval: Approval) -> None:
    """Only a call still waiting for a decision is anyone's to take."""
    if approval.status == ApprovalStatus.EXPIRED or (
        approval.status == ApprovalStatus.PENDING_APPROVAL and timezone.now() >= approval.expires_at
    ):
        raise errors.InterruptExpired("The call expired; there is nothing to take.")
    if approval.status == ApprovalStatus.CANCELLED:
        raise errors.RunFinished("The customer's request ended; there is nothing to take.")
    if approval.status != ApprovalStatus.PENDING_APPROVAL:
        raise errors.AlreadyDecided(
            f"{approval.decided_by_name or 'Someone'} decided this call already.",
            decided_by=approval.decided_by_name,
            decided_at=iso_z(approval.decided_at),
            decision=approval.decision or None,
        )


def approver_group_set(*, merchant, name: str, usernames: list[str]) -> ApproverGroup:
    """The shop's group `name` with exactly these members (made if new), each a supervisor
    of the shop now. Holding the shop's lock, so two at once write one group in turn."""
    users = {user.username: user for user in User.objects.filter(username__in=usernames)}
    strangers = []
    for username in dict.fromkeys(usernames):
        user = users.get(username)
        principal = principal_for_user(user=user, merchant=merchant) if user else None
        if principal is None or not principal.can_supervise:
            strangers.append(username)
    if strangers:
        raise errors.InvalidInput(
            f"Only supervisors of {merchant.name} are members of its groups: "
            f"{', '.join(strangers)} {'is' if len(strangers) == 1 else 'are'} not.",
            errors=[{"field": "members", "message": "Not a supervisor of this shop."}],
        )
    with transaction.atomic():
        merchant_lock(merchant.pk)
        group, _ = ApproverGroup.objects.get_or_create(merchant=merchant, name=name)
        group.members.set(users.values())
    return group
