"""Approver bands under random sequences: a hypothesis RuleBasedStateMachine over a shop's policy
(0 to 3 bands of 1 to 3 approvals, of Finance, Support or anyone, from random amounts; changed
mid-way), its approver groups and its supervisors' roles (changed mid-way), refunds asked for by
a customer and by a supervisor, random voters (in and out of the groups, the requester, a
customer, a service key) approving, revising to random amounts and rejecting, and worker ticks.

The machine keeps its own model of who may vote and predicts every answer from it. After every
step: money moved only for arguments whose digest had votes from as many distinct eligible voters
as their band asks, when the call settled and again when it executed; nothing settled with
fewer. Each example runs in a transaction rolled back at its end; AGENTPORTAL_MACHINE_EXAMPLES
sets how many (40 by default, and at most)."""

import os
from dataclasses import dataclass
from decimal import Decimal

import hypothesis
import hypothesis.stateful
import pytest
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentportal.errors import DomainError
from agentportal.models import Membership, Role
from agentportal.principals import Principal
from agentportal.selectors import principal_for_user
from agentportal.services import api_key_create
from approvals.gate.assignment import approver_group_set
from approvals.gate.services import DecisionRequest, approval_decide
from approvals.models import Approval, ApprovalPolicy, ApprovalStatus, Refund, args_digest
from runs import worker
from runs.models import ACTIVE_STATUSES, AgentRun, ErrorCode, RunStatus
from runs.tools import TOOLS
from tests import factories
from tests.approvals.policy_helpers import big_order, policy_set
from tests.problems import refusal_problem

pytestmark = pytest.mark.django_db


# The shop's supervisors (rita also asks for refunds of her own); alice is a customer.
SUPERVISORS = ["sam", "sue", "ann", "ben", "rita"]
VOTERS = [*SUPERVISORS, "alice", "key"]
GROUPS = ["Finance", "Support"]
ORDER_OF = {"alice": "ORD-9001", "rita": "ORD-7001"}
# (hypothesis favours the first of each list: the amounts and bands that need people first)
AMOUNTS = ["250.00", "450.00", "150.00", "50.00"]
REVISED_AMOUNTS = [*AMOUNTS, "100.00", "600.00"]
BAND = st.tuples(
    st.sampled_from(["100.00", None, "200.00", "400.00"]),
    st.sampled_from([2, 3, 1]),
    st.sampled_from([*GROUPS, None]),
)
# 0 to 3 bands, each as likely, starting at distinct amounts
BANDS = st.sampled_from([2, 1, 3, 0]).flatmap(
    lambda count: st.lists(BAND, min_size=count, max_size=count, unique_by=lambda b: b[0])
)
MEMBERS = st.sets(st.sampled_from(SUPERVISORS), max_size=4)
REFUND_ARGS = TOOLS["issue_refund"].args_model
MAX_EXAMPLES = int(os.environ.get("AGENTPORTAL_QUORUM_MACHINE_EXAMPLES", "40"))
# A call's statuses, as the model knows them: revoked is a call cancelled by its run's failure.
PENDING, SETTLED = ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING
REJECTED, EXECUTED = ApprovalStatus.REJECTED, ApprovalStatus.EXECUTED
REVOKED = ApprovalStatus.CANCELLED


@dataclass
class Call:
    """A call as the model knows it: `table` is what approving it approves (once settled,
    what it approved); `settled_with`, `executed_with`: (distinct eligible voters, approvals
    required, digest) when it settled, when it executed."""

    requester: str
    version: int
    proposed: dict
    table: dict
    status: str = PENDING
    settled_with: tuple | None = None
    executed_with: tuple | None = None


@dataclass(frozen=True)
class Vote:
    """A vote given; `eligible`: whether its voter might vote for that band when they did."""

    approval: int
    digest: str
    voter: str
    eligible: bool


def band_of(bands: list, amount: Decimal) -> tuple[int, str | None]:
    """(approvals, group) of the band with the highest `from` at or below the amount (None:
    every amount); below every band, one approval of any supervisor."""
    fitting = [band for band in bands if band[0] is None or Decimal(band[0]) <= amount]
    if not fitting:
        return 1, None
    _, approvals, group = max(fitting, key=lambda b: (b[0] is not None, Decimal(b[0] or 0)))
    return approvals, group


class QuorumMachine(RuleBasedStateMachine):
    def __init__(self, shop, key: Principal):
        super().__init__()
        self.shop, self.key = shop, key
        self.users = {user.username: user for user in User.objects.filter(username__in=VOTERS)}
        self.supervising = set(SUPERVISORS)
        self.groups: dict[str, set[str]] = {name: set() for name in GROUPS}
        self.bands: dict[int, list] = {}  # a policy version's bands, by its id
        self.version, self.runs, self.calls, self.votes = 0, [], {}, []
        # Everything this example writes is rolled back in teardown.
        self._example = transaction.atomic()
        self._example.__enter__()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._example.__exit__(None, None, None)

    def need(self, call: Call, arguments: dict) -> tuple[int, str | None]:
        return band_of(self.bands[call.version], Decimal(arguments["amount"]))

    def eligible(self, voter: str, call: Call, group: str | None) -> bool:
        """Whether this voter's approval counts for a band of `group`, as things are now."""
        if voter == "key":
            return group is None
        in_group = group is None or voter in self.groups[group]
        return voter != call.requester and in_group and voter in self.supervising

    def quorum(self, pk: int) -> tuple[int, int, str]:
        """(distinct eligible voters, approvals required, digest) of the arguments on the table."""
        call, digest = self.calls[pk], self.table(pk)
        required, group = self.need(call, call.table)
        voters = self.voters(pk, digest)
        counted = {voter for voter in voters if self.eligible(voter, call, group)}
        return len(counted), required, digest

    def voters(self, pk: int, digest: str) -> set[str]:
        return {vote.voter for vote in self.votes if (vote.approval, vote.digest) == (pk, digest)}

    def expected(self, pk: int, who: str, decision: str, arguments: dict):
        """What approval_decide must answer, in the gate's order of checks."""
        call = self.calls[pk]
        if who != "key" and who not in self.supervising:
            return (403, "permission_denied")
        if call.status != PENDING:
            return (409, "run_finished" if call.status == REVOKED else "already_decided")
        if decision == "reject":
            return REJECTED
        required, group = self.need(call, arguments)
        if who == call.requester or (group and not self.eligible(who, call, group)):
            return (403, "permission_denied")
        round_voters = self.voters(pk, args_digest(arguments))
        if who in round_voters:
            return (409, "same_approver")
        counted = [v for v in round_voters if self.eligible(v, call, group)]
        given = len(counted) + 1
        if who == "key" and required > 1:
            if "key" in round_voters:
                return (409, "same_approver")
            if given >= required:
                return (403, "permission_denied")
        return SETTLED if given >= required else PENDING

    def table(self, pk: int) -> str:
        return args_digest(self.calls[pk].table)

    def voter_id(self, who: str) -> str:
        return f"key:{self.key.api_key.pk}" if who == "key" else f"user:{self.users[who].pk}"

    def principal(self, who: str) -> Principal:
        if who == "key":
            return self.key
        return principal_for_user(user=self.users[who], merchant=self.shop)

    @initialize(
        finance=st.sets(st.sampled_from(SUPERVISORS), min_size=2, max_size=4),
        support=st.sets(st.sampled_from(SUPERVISORS), min_size=2, max_size=4),
        bands=BANDS,
        amount=st.sampled_from(AMOUNTS),
        ritas_too=st.booleans(),
    )
    def a_shop_with_groups_a_policy_and_refunds(self, finance, support, bands, amount, ritas_too):
        self.group_change("Finance", finance)
        self.group_change("Support", support)
        self.policy_change(bands)
        self.refund_ask("alice", amount)
        if ritas_too:
            self.refund_ask("rita", amount)
        self.tick()

    @rule(name=st.sampled_from(GROUPS), members=MEMBERS)
    def group_change(self, name: str, members: set[str]) -> None:
        if members <= self.supervising:
            approver_group_set(merchant=self.shop, name=name, usernames=sorted(members))
            self.groups[name] = set(members)
            return
        # only the shop's supervisors are members of its groups
        with pytest.raises(DomainError) as refused:
            approver_group_set(merchant=self.shop, name=name, usernames=sorted(members))
        assert refusal_problem(refused.value) == (400, "validation_error")

    @rule(bands=BANDS)
    def policy_change(self, bands: list) -> None:
        """A new version: calls already asked for keep the version they were created under."""
        policy = policy_set(self.shop, approver_bands=bands)
        self.version = ApprovalPolicy.objects.get(pk=policy.pk).current_id
        self.bands[self.version] = list(bands)

    def refund_ask(self, customer: str, amount: str) -> None:
        user = self.users[customer]
        if AgentRun.objects.filter(account=user, status__in=ACTIVE_STATUSES).count() >= 3:
            return
        message = f"I want a refund for {ORDER_OF[customer]} amount {amount}"
        self.runs.append(factories.run_queue(customer=user, merchant=self.shop, message=message).pk)

    def tick(self) -> None:
        """A worker tick. Each settled call executes if its quorum holds now (everyone's role
        and group as they are), else its run fails APPROVER_REVOKED with nothing paid; new
        calls wait under the policy version current now, needing what its band asks."""
        settled = {pk: self.quorum(pk) for pk, call in self.calls.items() if call.status == SETTLED}
        worker.tick()
        assert not AgentRun.objects.filter(pk__in=self.runs, status=RunStatus.QUEUED).exists()
        for pk, (have, required, digest) in settled.items():
            call, approval = self.calls[pk], Approval.objects.select_related("run").get(pk=pk)
            paid = Refund.objects.filter(idempotency_key=approval.tool_execution_key)
            if have >= required:
                assert approval.status == EXECUTED, (approval.status, have)
                assert approval.executed_args == call.table
                assert [refund.amount for refund in paid] == [Decimal(call.table["amount"])]
                call.status, call.executed_with = EXECUTED, (have, required, digest)
            else:
                assert approval.status == REVOKED and not paid.exists(), (have, required)
                assert approval.run.error_code == ErrorCode.APPROVER_REVOKED
                call.status = REVOKED
        for approval in Approval.objects.filter(run_id__in=self.runs).exclude(pk__in=self.calls):
            assert approval.policy_version_id == self.version
            requester, proposed = approval.run.account.username, approval.proposed_args
            self.calls[approval.pk] = Call(requester, self.version, proposed, table=proposed)
            assert approval.status == PENDING
            assert AgentRun.objects.get(pk=approval.run_id).status == RunStatus.WAITING_APPROVAL

    @rule(who=st.sampled_from(SUPERVISORS), supervisor=st.booleans())
    def role_change(self, who: str, supervisor: bool) -> None:
        """A supervisor loses the role (a customer of the shop now) or gets it back."""
        role = Role.SUPERVISOR if supervisor else Role.CUSTOMER
        Membership.objects.filter(user=self.users[who], merchant=self.shop).update(role=role)
        (self.supervising.add if supervisor else self.supervising.discard)(who)

    def has_voters(self) -> bool:
        return any(self.calls[vote.approval].status in (PENDING, SETTLED) for vote in self.votes)

    @precondition(has_voters)
    @rule(data=st.data())
    def approver_revoked(self, data):
        """Someone who approved a call, waiting or settled, loses the role or leaves the band's
        group (before the call is completed, or executed)."""
        open_calls = {pk for pk, call in self.calls.items() if call.status in (PENDING, SETTLED)}
        pk = data.draw(st.sampled_from(sorted(open_calls & {v.approval for v in self.votes})))
        call, voters = self.calls[pk], self.voters(pk, self.table(pk))
        if not voters - {"key"}:
            return
        who = data.draw(st.sampled_from(sorted(voters - {"key"})), label="who")
        _, group = self.need(call, call.table)
        if group and data.draw(st.booleans(), label="leaves the group"):
            self.group_change(group, (self.groups[group] & self.supervising) - {who})
        else:
            self.role_change(who, False)

    @rule(customer=st.sampled_from(sorted(ORDER_OF)), amount=st.sampled_from(AMOUNTS))
    def refund_asked(self, customer, amount):
        """A customer (or rita) asks; a worker takes the run to its call."""
        self.refund_ask(customer, amount)
        self.tick()

    @rule()
    def worker_tick(self):
        self.tick()

    def has_pending(self) -> bool:
        return any(call.status == PENDING for call in self.calls.values())

    @precondition(has_pending)
    @rule(data=st.data())
    def decide(self, data):
        # (one argument: hypothesis then offers this rule before those with more)
        decision = data.draw(st.sampled_from(["approve"] * 4 + ["revise"] * 2 + ["reject"]))
        amount = data.draw(st.sampled_from(REVISED_AMOUNTS), label="amount")
        # pending calls are the interesting ones: a decided one now and then
        pending = sorted(pk for pk, call in self.calls.items() if call.status == PENDING)
        pk = data.draw(st.sampled_from(pending * 9 + sorted(self.calls)), label="call")
        call, approval = self.calls[pk], Approval.objects.select_related("run").get(pk=pk)
        # anyone, though more often someone whose approval would count and is not given yet
        _, group = self.need(call, call.table)
        voted = self.voters(pk, self.table(pk))
        fresh = [who for who in VOTERS if self.eligible(who, call, group) and who not in voted]
        who = data.draw(st.sampled_from(fresh * 2 + VOTERS), label="who")
        arguments, revised = call.table, {**call.proposed, "amount": amount}
        if decision == "revise":
            arguments = REFUND_ARGS.model_validate(revised).model_dump(mode="json")
        expected = self.expected(pk, who, decision, arguments)

        # when
        request = DecisionRequest(
            interrupt_id=approval.interrupt_id,
            decision=decision,
            tool_args=dict(arguments) if decision == "revise" else None,
            reason="declined by the machine" if decision == "reject" else "",
            # an approve names the digest of what its decider was shown
            args_digest=args_digest(call.table) if decision == "approve" else None,
        )
        try:
            approval_decide(run=approval.run, principal=self.principal(who), request=request)
            approval.refresh_from_db()
            outcome = approval.status
        except DomainError as refusal:
            outcome = refusal_problem(refusal)

        # then: the answer the model predicts; a vote only from someone its band allows
        assert outcome == expected, (outcome, expected, who, decision, call, self.groups)
        if outcome in (PENDING, SETTLED):
            _, group = self.need(call, arguments)
            vote = Vote(pk, args_digest(arguments), who, self.eligible(who, call, group))
            assert vote.eligible, vote
            self.votes.append(vote)
            call.table = arguments
        if outcome == SETTLED:
            have, required, digest = self.quorum(pk)
            assert have >= required, (have, required)
            assert who != "key" or required == 1
            call.settled_with = (have, required, digest)
        if outcome in (SETTLED, REJECTED):
            call.status = outcome

    @invariant()
    def every_call_is_where_the_model_says(self):
        approvals = Approval.objects.filter(run_id__in=self.runs).prefetch_related("votes")
        assert {approval.pk for approval in approvals} == set(self.calls)
        for approval in approvals:
            call = self.calls[approval.pk]
            assert approval.status == call.status, (approval.status, call)
            votes = {(vote.args_digest, vote.voter) for vote in approval.votes.all()}
            mine = [vote for vote in self.votes if vote.approval == approval.pk]
            assert votes == {(vote.digest, self.voter_id(vote.voter)) for vote in mine}
            if call.status != REJECTED:
                assert approval.arguments_on_the_table == call.table
                need = (approval.required_approvals, approval.required_group or None)
                assert need == self.need(call, call.table), (need, call)

    @invariant()
    def money_moved_only_for_arguments_that_had_their_quorum(self):
        """Every refund is a call's executed arguments, paid once, which had votes for their
        digest from as many eligible voters as the band of its version asks, when it settled
        and when it executed; and no call settled with fewer."""
        keys = Approval.objects.filter(pk__in=self.calls).values_list("pk", "tool_execution_key")
        keys = dict(keys)
        executed = {keys[pk]: call for pk, call in self.calls.items() if call.status == EXECUTED}
        refunds = list(Refund.objects.filter(merchant=self.shop))
        assert sorted(refund.idempotency_key for refund in refunds) == sorted(executed)
        for refund in refunds:
            call = executed[refund.idempotency_key]
            digest = args_digest(call.table)
            required, _ = self.need(call, call.table)
            assert refund.amount == Decimal(call.table["amount"])
            assert call.settled_with[1:] == call.executed_with[1:] == (required, digest)
            assert call.settled_with[0] >= required and call.executed_with[0] >= required
        for call in self.calls.values():
            if call.status in (SETTLED, EXECUTED, REVOKED):
                have, required, digest = call.settled_with
                assert have >= required and digest == args_digest(call.table)


def test_quorum_state_machine_keeps_its_invariants(demo):
    for name in ("ann", "ben", "rita"):
        factories.user_create(name, merchant=demo, role=Role.SUPERVISOR)
    big_order(demo, total="100000.00")
    rita = User.objects.get(username="rita")
    factories.order_create(merchant=demo, customer=rita, number="ORD-7001", total="100000.00")
    api_key, _ = api_key_create(merchant=demo, role="service")
    key = Principal(merchant=demo, role="service", api_key=api_key)
    hypothesis.stateful.run_state_machine_as_test(
        lambda: QuorumMachine(demo, key),
        settings=hypothesis.settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
