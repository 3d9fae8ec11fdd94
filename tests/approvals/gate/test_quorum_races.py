"""Approver bands under concurrency, with real threads on real connections, on both databases:
sixteen supervisors at once on a call that needs three of Finance, a revision racing fifteen
approvals, an approver who leaves the group (or loses the role) between the call's settling and
its execution, and the requester of a run, who never approves its calls but may reject them."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from agentportal.models import Membership, Role
from approvals.gate.assignment import approver_group_set
from approvals.gate.policies import call_requirement
from approvals.models import Approval, ApprovalStatus, ApprovalVote, Refund, args_digest
from runs import worker
from runs.models import AgentRun, ErrorCode, RunEvent, RunStatus
from tests import factories
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.threads import Background, in_threads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shop(demo):
    big_order(demo, total="100000.00")
    return demo


def supervisors(merchant, count: int, prefix: str = "supervisor") -> list[str]:
    names = [f"{prefix}-{index}" for index in range(count)]
    for name in names:
        factories.user_create(name, merchant=merchant, role=Role.SUPERVISOR)
    return names


def waiting_refund(merchant, amount: str) -> tuple[AgentRun, Approval]:
    run = refund_run(merchant, amount, order="ORD-9001")
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    return run, approval_of(run)


def decide(client, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **body},
        format="json",
    )


def approve_as_seen(client, approval):
    """An approve naming the digest of what the client was just shown (GET, then POST)."""
    shown = client.get(f"/api/v1/approvals/{approval.interrupt_id}").json()
    seen = {"args_digest": shown["args_digest"]} if shown.get("args_digest") else {}
    return decide(client, approval, **seen)


def code(response) -> tuple[int, str | None]:
    """(status, problem code): (200, None) for a decision taken."""
    return response.status_code, response.json().get("code")


def worker_until_finished(run: AgentRun) -> AgentRun:
    for _ in range(10):
        worker.tick()
        run.refresh_from_db()
        if run.is_finished:
            return run
    raise AssertionError(f"run {run.pk} did not finish: {run.status}")


def voters_of(approval: Approval, digest: str) -> list[str]:
    votes = ApprovalVote.objects.filter(approval=approval, args_digest=digest)
    return [vote.user.username for vote in votes.select_related("user")]


def assert_executed_with_its_quorum(approval: Approval, *, group: str, members: set[str]) -> None:
    """The call executed the arguments it approved, once, with as many distinct members of the
    band's group as its policy version asks for exactly those arguments."""
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXECUTED
    assert approval.executed_args == approval.approved_args
    digest = args_digest(approval.executed_args)
    assert approval.args_digest == digest
    need = call_requirement(
        version=approval.policy_version, arguments=approval.executed_args, now=approval.updated_at
    )
    voters = voters_of(approval, digest)
    assert len(voters) == len(set(voters)) >= need.required_approvals, voters
    if need.group:
        assert need.group == group and set(voters) <= members, voters
    assert "alice" not in voters
    refunds = Refund.objects.filter(idempotency_key=approval.tool_execution_key)
    assert [refund.amount for refund in refunds] == [Decimal(approval.executed_args["amount"])]


def test_sixteen_supervisors_at_once_on_three_of_finance(shop, api):
    # given: 16 supervisors, 10 of them in Finance; a refund of 300.00 needing 3 of Finance
    names = supervisors(shop, 16)
    finance = set(names[:10])
    approver_group_set(merchant=shop, name="Finance", usernames=sorted(finance))
    policy_set(shop, approver_bands=[("200.00", 3, "Finance")])
    run, approval = waiting_refund(shop, "300")
    assert (approval.required_approvals, approval.required_group) == (3, "Finance")
    digest = approval.digest_on_the_table
    clients = [api(name) for name in names]

    # when: all approve at once, each naming the digest they were shown
    responses = in_threads([lambda c=c: approve_as_seen(c, approval) for c in clients])

    # then: three members counted, the other members found it decided
    by_name = dict(zip(names, map(code, responses), strict=True))
    members = sorted(outcome for name, outcome in by_name.items() if name in finance)
    assert members == [(200, None)] * 3 + [(409, "already_decided")] * 7, members
    # a non-member is refused (or, arriving after the third member, finds it decided: the
    # order of checks of DESIGN 6.1 answers already_decided first); never counted
    outsiders = {outcome for name, outcome in by_name.items() if name not in finance}
    assert outsiders <= {(403, "permission_denied"), (409, "already_decided")}, outsiders
    voters = voters_of(approval, digest)
    assert len(voters) == len(set(voters)) == 3 and set(voters) <= finance
    assert ApprovalVote.objects.filter(approval=approval).count() == 3
    assert approval_of(run).status == ApprovalStatus.APPROVED_EXECUTING
    assert RunEvent.objects.filter(run=run, type="approval.approval_given").count() == 2
    assert RunEvent.objects.filter(run=run, type="approval.decided").count() == 1

    # when: the worker runs the call
    run = worker_until_finished(run)

    # then: exactly one refund of the approved amount
    assert run.status == RunStatus.COMPLETED
    assert Refund.objects.count() == 1
    assert Refund.objects.get().amount == Decimal("300.00")
    assert_executed_with_its_quorum(approval, group="Finance", members=finance)


def test_outsiders_racing_members_are_refused_and_never_counted(shop, api):
    # given: a refund needing 3 of Finance; 6 outsiders and 2 members, who cannot complete it
    names = supervisors(shop, 9)
    finance = set(names[:3])
    approver_group_set(merchant=shop, name="Finance", usernames=sorted(finance))
    policy_set(shop, approver_bands=[("200.00", 3, "Finance")])
    run, approval = waiting_refund(shop, "300")
    digest = approval.digest_on_the_table
    racing = names[1:]

    # when: all 8 approve at once
    clients = [api(name) for name in racing]
    responses = in_threads([lambda c=c: decide(c, approval, args_digest=digest) for c in clients])

    # then: every outsider 403, both members counted, the call still waits for one more
    by_name = dict(zip(racing, map(code, responses), strict=True))
    assert {by_name[name] for name in racing if name not in finance} == {(403, "permission_denied")}
    assert [by_name[name] for name in racing if name in finance] == [(200, None)] * 2
    assert sorted(voters_of(approval, digest)) == sorted(finance - {names[0]})
    assert approval_of(run).status == ApprovalStatus.PENDING_APPROVAL
    assert not Refund.objects.exists()

    # when: the third member approves and the worker runs
    assert code(decide(api(names[0]), approval, args_digest=digest)) == (200, None)
    worker_until_finished(run)

    # then: paid once
    assert_executed_with_its_quorum(approval, group="Finance", members=finance)


def revision_race(clients, approval: Approval, amount: str) -> list:
    """The first client revises the call's amount while the others approve what they see."""
    revised = {**approval.proposed_args, "amount": amount}
    return in_threads(
        [
            lambda: decide(clients[0], approval, "revise", tool_args=revised),
            *(lambda c=c: approve_as_seen(c, approval) for c in clients[1:]),
        ]
    )


@pytest.mark.parametrize("revised", ["250.00", "150.00"])
def test_fifteen_approvals_racing_a_revision_execute_what_its_band_asked_for(shop, api, revised):
    # given: 16 Finance members; 2 of Finance from 200.00, 1 of anyone below
    names = supervisors(shop, 16)
    finance = set(names)
    approver_group_set(merchant=shop, name="Finance", usernames=names)
    policy_set(shop, approver_bands=[("200.00", 2, "Finance"), (None, 1, None)])
    clients = [api(name) for name in names]
    for _ in range(4):
        run, approval = waiting_refund(shop, "300")

        # when: one member revises the amount while the other 15 approve what they are shown
        responses = revision_race(clients, approval, revised)

        # then: each decision counted or was refused whole; one vote per 200
        outcomes = [code(response) for response in responses]
        assert set(outcomes) <= {
            (200, None),
            (409, "already_decided"),
            (409, "arguments_changed"),
        }, outcomes
        assert ApprovalVote.objects.filter(approval=approval).count() == outcomes.count((200, None))
        approval.refresh_from_db()
        if approval.status == ApprovalStatus.PENDING_APPROVAL:
            # the revision landed as the first vote for its amount: a colleague completes it
            table = approval.digest_on_the_table
            assert approval.arguments_on_the_table["amount"] == revised
            assert voters_of(approval, table) == [names[0]]
            assert code(decide(clients[1], approval, args_digest=table)) == (200, None)
        run = worker_until_finished(run)

        # then: what ran is what 2 (or, below the band, 1) distinct members approved, once
        assert run.status == RunStatus.COMPLETED
        assert_executed_with_its_quorum(approval, group="Finance", members=finance)
        assert approval.executed_args["amount"] in ("300.00", revised)
    assert Refund.objects.count() == 4


def settled_by_sam_and_sue(shop, api, *, also_in_finance: list[str]) -> tuple[AgentRun, Approval]:
    """A refund of 300.00 needing 2 of Finance, approved by sam and sue, not yet executed."""
    approver_group_set(merchant=shop, name="Finance", usernames=["sam", "sue", *also_in_finance])
    policy_set(shop, approver_bands=[("200.00", 2, "Finance")])
    run, approval = waiting_refund(shop, "300")
    digest = approval.digest_on_the_table
    for name in ("sam", "sue"):
        assert code(decide(api(name), approval, args_digest=digest)) == (200, None)
    assert approval_of(run).status == ApprovalStatus.APPROVED_EXECUTING
    return run, approval


def revoke(shop, how: str, *, name: str, others: list[str]) -> None:
    if how == "left_the_group":
        approver_group_set(merchant=shop, name="Finance", usernames=others)
    else:
        user = User.objects.get(username=name)
        Membership.objects.filter(user=user, merchant=shop).update(role=Role.CUSTOMER)


@pytest.mark.parametrize("how", ["left_the_group", "no_longer_supervisor"])
@pytest.mark.parametrize("who", ["sam", "sue"])
def test_an_approver_revoked_before_execution_fails_the_run(shop, api, how, who):
    # given: sam and sue of Finance approved; a third member stays
    supervisors(shop, 1, prefix="fin")
    run, _ = settled_by_sam_and_sue(shop, api, also_in_finance=["fin-0"])

    # when: one of them leaves Finance (or the shop's supervisors) before a worker executes
    remaining = [name for name in ("sam", "sue") if name != who]
    revoke(shop, how, name=who, others=[*remaining, "fin-0"])
    run = worker_until_finished(run)

    # then: nothing is paid, the run fails with APPROVER_REVOKED
    assert (run.status, run.error_code) == (RunStatus.FAILED, ErrorCode.APPROVER_REVOKED)
    assert approval_of(run).status == ApprovalStatus.CANCELLED
    assert not Refund.objects.exists()


def test_a_group_change_keeping_both_approvers_executes(shop, api):
    # given: sam and sue of Finance approved
    supervisors(shop, 2, prefix="fin")
    run, approval = settled_by_sam_and_sue(shop, api, also_in_finance=["fin-0"])

    # when: Finance changes, keeping both of them
    approver_group_set(merchant=shop, name="Finance", usernames=["sue", "fin-1", "sam"])
    run = worker_until_finished(run)

    # then: paid once
    assert run.status == RunStatus.COMPLETED
    assert_executed_with_its_quorum(approval, group="Finance", members={"sam", "sue"})


def test_a_removal_racing_the_worker_pays_or_fails_whole(shop, api):
    for _ in range(6):
        # given: sam and sue of Finance approved a refund
        run, approval = settled_by_sam_and_sue(shop, api, also_in_finance=[])

        # when: sam leaves Finance while a worker executes the call
        worker_thread = Background(lambda r=run: worker_until_finished(r))
        approver_group_set(merchant=shop, name="Finance", usernames=["sue"])
        run = worker_thread.join()

        # then: either paid with both approvals counted, or failed with nothing paid
        approval.refresh_from_db()
        refunds = Refund.objects.filter(idempotency_key=approval.tool_execution_key).count()
        outcome = (run.status, run.error_code, approval.status, refunds)
        assert outcome in {
            (RunStatus.COMPLETED, "", ApprovalStatus.EXECUTED, 1),
            (RunStatus.FAILED, ErrorCode.APPROVER_REVOKED, ApprovalStatus.CANCELLED, 0),
        }, outcome


@pytest.fixture
def rita(shop):
    """A supervisor of the shop, in Finance, who asks the agent for a refund of her own."""
    user = factories.user_create("rita", merchant=shop, role=Role.SUPERVISOR)
    factories.order_create(merchant=shop, customer=user, number="ORD-7001", total="100000.00")
    approver_group_set(merchant=shop, name="Finance", usernames=["rita", "sam", "sue"])
    policy_set(shop, approver_bands=[("200.00", 2, "Finance"), (None, 1, None)])
    return user


def ritas_refund(shop, rita, amount: str) -> tuple[AgentRun, Approval]:
    message = f"I want a refund for ORD-7001 amount {amount}"
    run = factories.run_queue(customer=rita, merchant=shop, message=message)
    worker.tick()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING_APPROVAL, (run.status, run.error_detail)
    return run, approval_of(run)


@pytest.mark.parametrize("amount", ["300", "50"])
def test_the_requester_never_approves_nor_revises_her_own_runs_call(shop, api, rita, amount):
    # given: rita's own refund, waiting (2 of Finance, or 1 of anyone)
    run, approval = ritas_refund(shop, rita, amount)
    digest, proposed = approval.digest_on_the_table, approval.proposed_args
    client = api("rita")

    # when: she approves and revises at once
    responses = in_threads(
        [
            lambda: decide(client, approval, args_digest=digest),
            lambda: decide(client, approval, "revise", tool_args={**proposed, "amount": "40.00"}),
        ]
    )

    # then: both refused, nothing recorded, still waiting
    assert [code(response) for response in responses] == [(403, "permission_denied")] * 2
    assert not ApprovalVote.objects.filter(approval=approval).exists()
    assert approval_of(run).status == ApprovalStatus.PENDING_APPROVAL

    # when: her colleagues approve
    for name in ("sam", "sue")[: approval.required_approvals]:
        assert code(decide(api(name), approval, args_digest=digest)) == (200, None)
    run = worker_until_finished(run)

    # then: paid once, with no vote of hers
    assert run.status == RunStatus.COMPLETED
    assert_executed_with_its_quorum(approval, group="Finance", members={"sam", "sue"})
    assert "rita" not in voters_of(approval, digest)


def test_the_requester_may_reject_her_own_runs_call(shop, api, rita):
    # given: rita's own refund of 300.00, with sam's approval
    run, approval = ritas_refund(shop, rita, "300")
    digest, proposed = approval.digest_on_the_table, approval.proposed_args
    assert code(decide(api("sam"), approval, args_digest=digest)) == (200, None)
    client = api("rita")

    # when: she approves, revises and rejects at once
    approve, revise, reject = in_threads(
        [
            lambda: decide(client, approval, args_digest=digest),
            lambda: decide(client, approval, "revise", tool_args={**proposed, "amount": "40.00"}),
            lambda: decide(client, approval, "reject", reason="not while I ask for it"),
        ]
    )

    # then: the rejection stands; the others were refused (or found it decided)
    assert code(reject) == (200, None)
    assert {code(approve), code(revise)} <= {(403, "permission_denied"), (409, "already_decided")}
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by) == (ApprovalStatus.REJECTED, rita)
    assert voters_of(approval, digest) == ["sam"]
    run = worker_until_finished(run)
    assert run.status == RunStatus.COMPLETED
    assert not Refund.objects.exists()


@pytest.mark.parametrize("band", [("200.00", 2, "Finance"), ("200.00", 2, None)])
@pytest.mark.parametrize("how", ["no_longer_supervisor", "membership_ended"])
def test_a_vote_of_someone_who_lost_the_role_does_not_complete_the_quorum(shop, api, band, how):
    # given: a refund needing 2 (of Finance, or of anyone); sam approved it
    supervisors(shop, 1, prefix="fin")
    approver_group_set(merchant=shop, name="Finance", usernames=["sam", "sue", "fin-0"])
    policy_set(shop, approver_bands=[band])
    run, approval = waiting_refund(shop, "300")
    digest = approval.digest_on_the_table
    assert code(decide(api("sam"), approval, args_digest=digest)) == (200, None)

    # when: sam stops being a supervisor of the shop, then sue approves
    sam = Membership.objects.filter(user__username="sam", merchant=shop)
    sam.update(**({"role": Role.CUSTOMER} if how == "no_longer_supervisor" else {"active": False}))
    assert code(decide(api("sue"), approval, args_digest=digest)) == (200, None)

    # then: sam's vote no longer counts: the call still waits for a second supervisor
    assert approval_of(run).status == ApprovalStatus.PENDING_APPROVAL
    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL

    # when: another member approves and the worker runs
    assert code(decide(api("fin-0"), approval, args_digest=digest)) == (200, None)
    run = worker_until_finished(run)

    # then: paid once, with sue's and fin-0's approvals besides sam's
    assert run.status == RunStatus.COMPLETED
    assert approval_of(run).status == ApprovalStatus.EXECUTED
    assert sorted(voters_of(approval, digest)) == ["fin-0", "sam", "sue"]
    assert [refund.amount for refund in Refund.objects.all()] == [Decimal("300.00")]
