"""Who may approve a call, and when enough people have: the quorum its policy's band asks for
(approvals.gate.bands). Approvals come from distinct people; from the band's approver group
when it names one (its members now, not when the policy was written); never from the person
whose run asked for the call; a shop's service keys together give at most one, and never the
one that completes a count of two or more. The same rules are counted again just before the
call executes, with everyone's role as it is then."""

from django.contrib.auth.models import AbstractBaseUser, User
from django.db.models import Q

from agentportal import errors
from agentportal.models import ApiKey, Role
from agentportal.principals import Principal
from agentportal.selectors import supervisor_memberships
from approvals.gate import policies
from approvals.gate.policies import CallRequirement
from approvals.models import Approval, ApprovalVote
from approvals.selectors import approver_group_members

DECIDING_ROLES = [Role.SUPERVISOR, Role.OPERATOR]
REQUESTER = "You started this run, so its calls need someone else's approval."


def approve_refusal(*, approval: Approval, user) -> str:
    """Why this person may not approve the call as it stands, for its page; "" if they may."""
    if user.pk == approval.run.account_id:
        return REQUESTER
    group = approval.required_group
    if group and not _group_members(approval, group, [user.pk]):
        return f"Only members of the {group} group approve this call."
    return ""


def voter_of(principal: Principal) -> str:
    """Who, as one comparable value: `user:<id>` or `key:<id>`."""
    if principal.user is not None:
        return f"user:{principal.user.pk}"
    return f"key:{principal.api_key.pk}"


def approval_count_locked(
    *,
    approval: Approval,
    requester_id: int,
    principal: Principal,
    need: CallRequirement,
    digest: str,
) -> int:
    """How many approvals the arguments of `digest` have once this principal's counts, or a
    refusal saying why it cannot count. Call holding the run's and the approval's locks."""
    user = principal.user
    if user is not None and user.pk == requester_id:
        raise errors.NotAllowed(REQUESTER)
    if need.group and (user is None or not _group_members(approval, need.group, [user.pk])):
        whose = "a service key's" if user is None else "yours"
        raise errors.NotAllowed(
            f"This call needs approvals from the {need.group} group; {whose} does not count."
        )
    round_votes = ApprovalVote.objects.filter(approval=approval, args_digest=digest)
    if round_votes.filter(voter=voter_of(principal)).exists():
        raise errors.SameApprover(
            "You approved these arguments already; another supervisor must approve them too."
        )
    counted = _counted(approval, list(round_votes), requester_id=requester_id, need=need)
    given = len(counted) + 1
    required = need.required_approvals
    if user is None and required > 1:
        # Four eyes are people's: the shop's service keys together are one vote at most,
        # and never the one that completes the count.
        if round_votes.filter(user__isnull=True).exists():
            raise errors.SameApprover(
                "A service key of this shop approved these arguments already; a supervisor "
                "must approve them too."
            )
        if given >= required:
            raise errors.NotAllowed(
                f"This call needs {required} approvals and the last must be a supervisor's: "
                "a service key's approval is never the one that completes it."
            )
    return given


def _counted(
    approval: Approval, votes: list[ApprovalVote], *, requester_id: int, need: CallRequirement
) -> list[ApprovalVote]:
    """The votes that count towards `need` now: of people who still decide calls of the shop
    (or service keys still valid), not the requester's, and of the band's group."""
    votes = [vote for vote in votes if vote.user_id is None or vote.user_id != requester_id]
    people = [vote.user_id for vote in votes if vote.user_id]
    deciding = _still_deciding(approval, people)
    if need.group:
        deciding &= _group_members(approval, need.group, people)
    return [vote for vote in votes if _counts(approval, vote, deciding)]


def _counts(approval: Approval, vote: ApprovalVote, deciding: set[int]) -> bool:
    if vote.user_id:
        return vote.user_id in deciding
    return decider_still_allowed(merchant=approval.merchant, user=None, api_key_id=vote.api_key_id)


def _still_deciding(approval: Approval, user_ids: list[int]) -> set[int]:
    """Which of these users decide calls of the call's shop now: active, and a supervisor or
    operator of the shop (or a superuser)."""
    return set(
        User.objects.filter(pk__in=user_ids, is_active=True)
        .filter(
            Q(is_superuser=True)
            | Q(
                memberships__merchant_id=approval.merchant_id,
                memberships__active=True,
                memberships__role__in=DECIDING_ROLES,
            )
        )
        .values_list("pk", flat=True)
    )


def _group_members(approval: Approval, group: str, user_ids: list[int]) -> set[int]:
    return approver_group_members(merchant_id=approval.merchant_id, group=group, user_ids=user_ids)


def decider_still_allowed(
    *, merchant, user: AbstractBaseUser | None, api_key_id: int | None
) -> bool:
    """Whoever decided must still hold a deciding role now, not only when they decided."""
    if user is not None:
        return user.is_active and (
            user.is_superuser
            or supervisor_memberships(merchant=merchant).filter(user=user).exists()
        )
    if api_key_id is not None:
        return ApiKey.objects.filter(
            pk=api_key_id, revoked_at__isnull=True, merchant__active=True
        ).exists()
    return False


def quorum_holds(approval: Approval, *, requester_id: int) -> bool:
    """The approved arguments about to run still have the approvals their band asks for, from
    people who each still hold a deciding role and belong to its group, none of them the
    requester (a policy's approval needs nobody). Approvals decided before votes were
    recorded name their one decider on the row."""
    if approval.decided_by_policy:
        return True
    votes = list(
        ApprovalVote.objects.filter(
            approval=approval, args_digest=approval.args_digest
        ).select_related("user")
    )
    if not votes:
        return decider_still_allowed(
            merchant=approval.merchant,
            user=approval.decided_by,
            api_key_id=approval.decided_by_key_id,
        )
    need = policies.call_requirement(
        version=approval.policy_version,
        arguments=approval.approved_args or {},
        now=approval.updated_at,
    )
    counted = _counted(approval, votes, requester_id=requester_id, need=need)
    return len({vote.voter for vote in counted}) >= need.required_approvals
