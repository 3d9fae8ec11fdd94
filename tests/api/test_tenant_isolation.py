"""Tenant isolation over the whole API: every operation the schema lists, called on the owner's
resources by the owner, another customer of the shop, another shop's customer, a supervisor, a
service key, a revoked key and no key. Each answer is a status the schema declares for that
operation; keys that are missing or revoked get 401; outsiders get 404 for the owner's
resources and never see one of the owner's ids in a list. The operations come from the schema,
so a new endpoint is covered without editing this test."""

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agentportal.models import ApiKey, Merchant
from agentportal.services import api_key_revoke
from approvals.gate.assignment import approver_group_set
from approvals.gate.delegation import absence_set
from approvals.models import Approval
from runs import worker
from runs.models import Conversation, RunInput
from tests import factories
from tests.approvals.plan_helpers import exchange_run, ticket_of
from tests.approvals.policy_helpers import policy_set

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_cache")]

REFUND = "I want a refund for ORD-1003 amount 20"
METHODS = ("get", "post", "put", "patch", "delete")
OUTSIDERS = ("another customer", "another shop's customer")
WITHOUT_STANDING = ("revoked key", "no key")
INSIDERS = ("owner", "supervisor", "service key")
# Path parameters whose operations answer outsiders by their role before looking the resource
# up (a shop's policy or group by a name each shop has its own of, a supervisor's absence): an
# outsider gets the same answer as for one that does not exist, which these name.
ANSWERED_BY_ROLE = {"tool_name": "no-such-name", "name": "no-such-name", "absence_id": "999999"}


def _operations() -> list[tuple[str, str, dict]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


OPERATIONS = _operations()


@pytest.fixture
def world(demo):
    """Alice's resources (a run waiting for a refund decision, an exchange plan, a
    conversation, an answer's receipt), her shop's refund policy and a client for every kind
    of caller."""
    alice = User.objects.get(username="alice")
    policy = policy_set(demo, auto_approve_up_to="5.00")
    run = factories.run_queue(customer=alice, merchant=demo, message=REFUND)
    worker.tick()
    ticket = ticket_of(exchange_run(demo))
    conversation = Conversation.objects.create(merchant=demo, customer=alice)
    receipt = RunInput.objects.create(
        run=run, interrupt_id="answered-before", idempotency_key="receipt-1", kind="answer"
    )
    # A supervisor's absence and an approver group of the shop, which its staff see.
    sam, sue = User.objects.get(username="sam"), User.objects.get(username="sue")
    absence = absence_set(
        merchant=demo,
        user=sam,
        delegate=sue,
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(days=1),
    )
    group = approver_group_set(merchant=demo, name="Finance", usernames=["sam"])
    path_values = {
        "run_id": str(run.pk),
        "interrupt_id": Approval.objects.get(run=run).interrupt_id,
        "conversation_id": str(conversation.pk),
        "ticket_id": str(ticket.pk),
        "idempotency_key": receipt.idempotency_key,
        "tool_name": policy.tool_name,
        "absence_id": str(absence.pk),
        "name": group.name,
    }
    other_shop = Merchant.objects.get(slug="other-shop")
    keys = {
        "owner": factories.api_key_for(alice, demo),
        "another customer": factories.api_key_for(User.objects.get(username="bob"), demo),
        "another shop's customer": factories.api_key_for(
            User.objects.get(username="olga"), other_shop
        ),
        "supervisor": factories.api_key_for(User.objects.get(username="sam"), demo),
        "service key": factories.api_key_for(None, demo, "service"),
        "revoked key": factories.api_key_for(alice, demo),
    }
    api_key_revoke(api_key=ApiKey.objects.order_by("-pk").first())
    clients = {"no key": APIClient()}
    for caller, key in keys.items():
        clients[caller] = APIClient()
        clients[caller].credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    # (The absence's number and the group's name are too short to look for in a body.)
    owned_ids = [
        *(value for key, value in path_values.items() if key not in ("absence_id", "name")),
        str(run.pk),
        str(ticket.run_id),
    ]
    return SimpleNamespace(path_values=path_values, clients=clients, owned_ids=owned_ids)


def _call(client: APIClient, method: str, path: str):
    if method == "GET":
        return client.get(path)
    return client.generic(
        method, path, json.dumps({}), content_type="application/json", HTTP_IDEMPOTENCY_KEY="m-1"
    )


@pytest.mark.parametrize(
    ("method", "template", "operation"),
    OPERATIONS,
    ids=[operation["operationId"] for _, _, operation in OPERATIONS],
)
def test_every_caller_gets_only_what_the_schema_and_the_tenancy_allow(
    method, template, operation, world
):
    # given the owner's resources in the operation's path
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "path"]
    unknown = [name for name in names if name not in world.path_values]
    assert not unknown, f"teach this test whose resource {unknown} names"
    path = template.format(**world.path_values)
    declared = {int(status) for status in operation["responses"]}

    # when every kind of caller calls it (outsiders first: the insiders' calls may change
    # state, never who may see it)
    order = [*WITHOUT_STANDING, *OUTSIDERS, *INSIDERS]
    answers = {caller: _call(world.clients[caller], method, path) for caller in order}

    # then
    for caller, answer in answers.items():
        seen = f"{caller}: {method} {path} -> {answer.status_code}"
        assert answer.status_code in declared, f"undeclared status, {seen}"
        if caller in WITHOUT_STANDING:
            assert answer.status_code == 401, seen
        elif caller in OUTSIDERS and names and set(names) <= set(ANSWERED_BY_ROLE):
            unused = template.format(**{name: ANSWERED_BY_ROLE[name] for name in names})
            assert _call(world.clients[caller], method, unused).status_code == (
                answer.status_code
            ), seen
        elif caller in OUTSIDERS and names:
            assert answer.status_code == 404, seen
        elif caller in OUTSIDERS and answer.status_code < 300:
            body = answer.content.decode()
            assert not [owned for owned in world.owned_ids if owned in body], seen
        elif caller in INSIDERS and names:
            assert answer.status_code not in (401, 404), seen


def test_the_matrix_covers_every_operation_of_the_schema():
    # A guard on the test itself: the schema lists the API's operations, all of them here.
    assert len(OPERATIONS) >= 21
    assert {operation["operationId"] for _, _, operation in OPERATIONS} >= {
        "runs_create",
        "runs_events_stream",
        "approvals_decide",
        "tickets_decide",
        "conversations_send",
    }
