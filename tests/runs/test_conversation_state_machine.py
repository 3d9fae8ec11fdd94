"""Random interleavings of messages, commands and worker steps (hypothesis): at most one
active run per conversation, no message runs twice, no dropped message ever runs."""

import hypothesis
import hypothesis.strategies as st
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import HealthCheck
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from agentportal.errors import DomainError
from agentportal.models import Merchant
from agentportal.principals import Principal
from runs import command_apply, commands, conversations, worker
from runs.models import (
    ACTIVE_STATUSES,
    AgentRun,
    Conversation,
    ConversationMessage,
    ConversationStatus,
    MessageStatus,
    RunInput,
)
from tests.problems import refusal_problem
from tests.runs import helpers
from tests.runs.conversation_helpers import FOLLOW_UP, STATUS, supervisor_create

TEXTS = [STATUS, FOLLOW_UP, "hello"]
COMMANDS = ["/stop", "/new", "/reset", "/status", "/takeover", "/release"]


class ConversationMachine(RuleBasedStateMachine):
    def __init__(self, shop: Merchant, customer: Principal, supervisor: Principal):
        super().__init__()
        self.customer, self.supervisor = customer, supervisor
        self._example = transaction.atomic()
        self._example.__enter__()
        self.conversation = conversations.conversation_create(merchant=shop, customer=customer.user)
        self.dropped: set[int] = set()
        self.closed: set = set()

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._example.__exit__(None, None, None)

    def _current(self) -> Conversation:
        return Conversation.objects.get(pk=self.conversation.pk)

    @rule(text=st.sampled_from(TEXTS))
    def customer_writes(self, text):
        try:
            conversations.message_send(conversation=self._current(), text=text)
        except DomainError as refusal:
            assert refusal_problem(refusal)[1] in ("conversation_closed", "too_many_open_runs")

    @rule(name=st.sampled_from(COMMANDS), as_supervisor=st.booleans())
    def command(self, name, as_supervisor):
        principal = self.supervisor if as_supervisor else self.customer
        command, argument = commands.command_parse(name, role=principal.role)
        try:
            commands.command_allowed(command, principal)
        except DomainError as refusal:
            assert (refusal_problem(refusal)[1], principal.role) == (
                "permission_denied",
                "customer",
            )
            return
        waiting = set(
            ConversationMessage.objects.filter(
                conversation=self.conversation,
                status__in=[MessageStatus.QUEUED, MessageStatus.HELD],
            ).values_list("pk", flat=True)
        )
        result = command_apply.command_run(
            conversation=self._current(), principal=principal, command=command, argument=argument
        )
        if command.pending == "drop":
            self.dropped |= waiting
        if command.name == "/new":
            self.closed.add(self.conversation.pk)
            self.conversation = Conversation.objects.get(pk=result["conversation_id"])

    @rule(name=st.sampled_from(["/stop", "/new", "/reset", "/takeover", "/release"]))
    def command_to_a_closed_conversation(self, name):
        if not self.closed:
            return
        command, argument = commands.command_parse(name, role=self.supervisor.role)
        closed = Conversation.objects.get(pk=sorted(self.closed)[0])
        try:
            command_apply.command_run(
                conversation=closed, principal=self.supervisor, command=command, argument=argument
            )
        except DomainError as refusal:
            assert refusal_problem(refusal)[1] == "conversation_closed"
        else:
            raise AssertionError(f"{name} was accepted by a closed conversation")

    @invariant()
    def closed_stays_closed(self):
        statuses = Conversation.objects.filter(pk__in=self.closed).values_list("status", flat=True)
        assert set(statuses) <= {ConversationStatus.CLOSED}

    @rule()
    def worker_ticks(self):
        worker.tick()

    @rule()
    def worker_takes_a_step(self):
        lease = helpers.run_claim()
        if lease is not None:
            helpers.run_step(lease)

    @invariant()
    def at_most_one_active_run_per_conversation(self):
        for conversation in Conversation.objects.all():
            active = list(
                AgentRun.objects.filter(
                    conversation=conversation, status__in=ACTIVE_STATUSES
                ).values_list("pk", flat=True)
            )
            assert len(active) <= 1
            if conversation.status != ConversationStatus.CLOSED:
                assert conversation.active_run_id == (active[0] if active else None)

    @invariant()
    def one_message_starts_each_run_and_later_ones_only_answer_it(self):
        run_ids = list(
            ConversationMessage.objects.exclude(run=None).values_list("run_id", flat=True)
        )
        runs = AgentRun.objects.filter(conversation__isnull=False).values_list("pk", flat=True)
        assert set(run_ids) == set(runs)
        answers = RunInput.objects.filter(idempotency_key__startswith="chat message ")
        assert answers.count() == len(run_ids) - len(set(run_ids))

    @invariant()
    def dropped_messages_never_run(self):
        for message in ConversationMessage.objects.filter(pk__in=self.dropped):
            assert message.status == MessageStatus.CANCELLED
            assert message.run_id is None


def test_conversation_state_machine_keeps_its_invariants(parcel_shop):
    pat = Principal(merchant=parcel_shop, role="customer", user=User.objects.get(username="pat"))
    sue = Principal(
        merchant=parcel_shop, role="supervisor", user=supervisor_create(parcel_shop, "sue")
    )
    run_state_machine_as_test(
        lambda: ConversationMachine(parcel_shop, pat, sue),
        settings=hypothesis.settings(
            max_examples=25,
            stateful_step_count=15,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
