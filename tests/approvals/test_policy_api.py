"""Approval policies over REST: a shop's operators and service keys read and set them; each
change is a new version, the same rules again are not; bad rules are 400 with field errors;
other roles get 403 and other shops see nothing."""

import json
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from agentportal.models import Merchant, Role
from approvals.models import ApprovalPolicy, ApprovalPolicyVersion
from tests import factories
from tests.approvals.policy_helpers import policy_set
from tests.problems import assert_problem
from tests.threads import in_threads

POLICIES = "/api/v1/policies"
REFUND_POLICY = f"{POLICIES}/issue_refund"
RULES = {
    "amount_field": "amount",
    "auto_approve_up_to": "10.00",
    "two_approvers_from": "200.00",
    "escalate_after_seconds": 600,
}


@pytest.fixture
def operator(demo, api):
    """A client with the key of opal, an operator of the demo shop."""
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    return api("opal")


def put(client, body, path=REFUND_POLICY):
    return client.put(path, json.dumps(body), content_type="application/json")


def versions(merchant=None) -> list[int]:
    rows = ApprovalPolicyVersion.objects.order_by("version")
    if merchant is not None:
        rows = rows.filter(policy__merchant=merchant)
    return list(rows.values_list("version", flat=True))


# --- reading and setting -----------------------------------------------------------------------


@pytest.mark.django_db
def test_an_operator_sets_a_policy_and_reads_it_back(demo, operator):
    # when
    response = put(operator, RULES)

    # then: the policy as its first version says, written by opal
    assert response.status_code == 200, response.json()
    body = response.json()
    policy = ApprovalPolicy.objects.get(merchant=demo, tool_name="issue_refund")
    assert body == {
        "id": policy.pk,
        "tool_name": "issue_refund",
        "version": 1,
        "amount_field": "amount",
        "auto_approve_up_to": "10.00",
        "two_approvers_from": "200.00",
        # the one band the shorthand stands for
        "approver_bands": [{"from": "200.00", "approvals": 2, "group": None}],
        "escalate_after_seconds": 600,
        "escalate_to_operators": True,
        "escalate_to_email": "",
        "updated_at": body["updated_at"],
    }
    assert body["updated_at"].endswith("Z")
    policy.refresh_from_db()
    assert policy.current.version == 1
    assert policy.current.created_by.username == "opal"
    assert policy.current.auto_approve_up_to == Decimal("10.00")

    # and it reads back the same, alone and in the list
    assert operator.get(REFUND_POLICY).json() == body
    assert operator.get(POLICIES).json() == {"results": [body]}


@pytest.mark.django_db
def test_a_changed_put_is_a_new_version_and_the_same_put_keeps_it(demo, operator):
    # given version 1
    first = put(operator, RULES).json()

    # when the same rules come again, an amount written another way included
    again = put(operator, {**RULES, "auto_approve_up_to": "10"})

    # then nothing new
    assert again.status_code == 200
    assert again.json() == first
    assert versions() == [1]

    # when a rule changes
    changed = put(
        operator, {**RULES, "two_approvers_from": "150.00", "escalate_to_email": "ops@shop.example"}
    )

    # then version 2 holds it, and version 1 is as it was
    assert changed.status_code == 200
    assert changed.json()["version"] == 2
    assert changed.json()["two_approvers_from"] == "150.00"
    assert changed.json()["escalate_to_email"] == "ops@shop.example"
    assert versions() == [1, 2]
    old = ApprovalPolicyVersion.objects.get(version=1)
    assert (old.two_approvers_from, old.escalate_to_email) == (Decimal("200.00"), "")
    policy = ApprovalPolicy.objects.get(merchant=demo)
    assert policy.current.version == 2


@pytest.mark.django_db
def test_null_turns_a_rule_off_and_the_optional_fields_take_their_defaults(demo, operator):
    # given a policy that escalates to an email only
    put(operator, {**RULES, "escalate_to_operators": False, "escalate_to_email": "ops@shop.test"})

    # when the rules come with nulls and without the optional fields
    body = {
        "amount_field": "amount",
        "auto_approve_up_to": None,
        "two_approvers_from": None,
        "escalate_after_seconds": None,
    }
    response = put(operator, body)

    # then
    assert response.status_code == 200
    assert response.json() | {"updated_at": None, "id": None} == {
        "id": None,
        "tool_name": "issue_refund",
        "version": 2,
        **body,
        "approver_bands": [],
        "escalate_to_operators": True,
        "escalate_to_email": "",
        "updated_at": None,
    }


@pytest.mark.django_db
def test_a_service_key_sets_and_reads_its_shops_policies(demo, api):
    service = api(None)

    response = put(service, RULES)

    assert response.status_code == 200
    assert ApprovalPolicy.objects.get(merchant=demo).current.created_by is None
    assert [p["tool_name"] for p in service.get(POLICIES).json()["results"]] == ["issue_refund"]


@pytest.mark.django_db
def test_the_list_is_the_shops_own(demo, api):
    # given a policy in each shop
    policy_set(demo, auto_approve_up_to="5.00")
    other = Merchant.objects.get(slug="other-shop")
    policy_set(other, auto_approve_up_to="7.00")

    # when each shop's service key lists them
    ours = api(None).get(POLICIES).json()["results"]
    theirs = api(None, merchant="other-shop").get(POLICIES).json()["results"]

    # then each sees its own
    assert [p["auto_approve_up_to"] for p in ours] == ["5.00"]
    assert [p["auto_approve_up_to"] for p in theirs] == ["7.00"]


# --- refusals -----------------------------------------------------------------------------------

BAD_RULES = [
    pytest.param(f"{POLICIES}/no_such_tool", RULES, "tool_name", id="unknown-tool"),
    pytest.param(f"{POLICIES}/lookup_order", RULES, "tool_name", id="tool-without-approval"),
    pytest.param(REFUND_POLICY, {**RULES, "amount_field": "order_id"}, "amount_field", id="text"),
    pytest.param(REFUND_POLICY, {**RULES, "amount_field": "price"}, "amount_field", id="no-arg"),
    pytest.param(
        REFUND_POLICY, {**RULES, "auto_approve_up_to": "-1.00"}, "auto_approve_up_to", id="neg"
    ),
    pytest.param(
        REFUND_POLICY, {**RULES, "two_approvers_from": "-5"}, "two_approvers_from", id="neg-four"
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "auto_approve_up_to": "300.00"},
        "two_approvers_from",
        id="inverted",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "auto_approve_up_to": "200.00"},
        "two_approvers_from",
        id="equal",
    ),
    pytest.param(
        REFUND_POLICY, {**RULES, "escalate_after_seconds": 0}, "escalate_after_seconds", id="zero"
    ),
    pytest.param(REFUND_POLICY, {**RULES, "priority": "high"}, "priority", id="unknown-field"),
    pytest.param(
        REFUND_POLICY, {**RULES, "auto_approve_up_to": 10}, "auto_approve_up_to", id="number"
    ),
    pytest.param(
        REFUND_POLICY, {**RULES, "auto_approve_up_to": "ten"}, "auto_approve_up_to", id="words"
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "auto_approve_up_to": "10.001"},
        "auto_approve_up_to",
        id="three-places",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "two_approvers_from": "NaN"},
        "two_approvers_from",
        id="not-a-number",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "escalate_after_seconds": "600"},
        "escalate_after_seconds",
        id="seconds-text",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "escalate_after_seconds": True},
        "escalate_after_seconds",
        id="seconds-boolean",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "escalate_after_seconds": 2**31},
        "escalate_after_seconds",
        id="seconds-too-many",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "escalate_to_operators": "yes"},
        "escalate_to_operators",
        id="operators-text",
    ),
    pytest.param(
        REFUND_POLICY,
        {**RULES, "escalate_to_email": "not an address"},
        "escalate_to_email",
        id="email",
    ),
    pytest.param(REFUND_POLICY, {**RULES, "amount_field": 5}, "amount_field", id="field-number"),
    pytest.param(
        REFUND_POLICY,
        {key: value for key, value in RULES.items() if key != "two_approvers_from"},
        "two_approvers_from",
        id="missing",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "body", "field"), BAD_RULES)
def test_bad_rules_are_400_with_the_field_and_write_nothing(demo, operator, path, body, field):
    # given version 1
    put(operator, RULES)

    # when
    response = put(operator, body, path=path)

    # then
    problem = assert_problem(response, 400, "validation_error")
    assert field in [error["field"] for error in problem["errors"]], problem
    assert all(error["message"] for error in problem["errors"])
    assert versions() == [1]
    assert ApprovalPolicy.objects.count() == 1


@pytest.mark.django_db
def test_an_amount_field_the_tool_lacks_is_named_with_the_ones_it_has(demo, operator):
    response = put(operator, {**RULES, "amount_field": "price"})

    problem = assert_problem(response, 400, "validation_error")
    assert problem["errors"] == [
        {"field": "amount_field", "message": "one of issue_refund's amounts: amount"}
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("username", ["sam", "alice"])
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", POLICIES), ("GET", REFUND_POLICY), ("PUT", REFUND_POLICY)],
)
def test_supervisors_and_customers_get_403_and_change_nothing(demo, api, username, method, path):
    # given version 1
    policy_set(demo, auto_approve_up_to="5.00")
    client = api(username)

    # when
    if method == "GET":
        response = client.get(path)
    else:
        response = put(client, {**RULES, "auto_approve_up_to": "50.00"}, path=path)

    # then
    assert_problem(response, 403, "permission_denied")
    assert versions() == [1]


@pytest.mark.django_db
def test_an_operator_made_a_supervisor_gets_403(demo, operator):
    # given opal's membership now only lets her supervise
    User.objects.get(username="opal").memberships.update(role=Role.SUPERVISOR)

    assert_problem(operator.get(POLICIES), 403, "permission_denied")


@pytest.mark.django_db
def test_a_tool_without_a_policy_is_404(demo, operator):
    assert_problem(operator.get(REFUND_POLICY), 404, "not_found")
    assert_problem(operator.get(f"{POLICIES}/no_such_tool"), 404, "not_found")


@pytest.mark.django_db
def test_another_shops_policy_is_not_found_and_not_changed(demo, api):
    # given demo-shop's refund policy
    policy_set(demo, auto_approve_up_to="5.00")
    other = api(None, merchant="other-shop")

    # when other-shop's service key reads it
    response = other.get(REFUND_POLICY)

    # then not found
    assert_problem(response, 404, "not_found")
    assert other.get(POLICIES).json() == {"results": []}

    # when it sets the same tool's policy: its own, demo-shop's is as it was
    created = put(other, RULES)
    assert created.status_code == 200
    assert created.json()["version"] == 1
    assert versions(demo) == [1]
    assert ApprovalPolicy.objects.get(merchant=demo).current.auto_approve_up_to == Decimal("5.00")


# --- concurrency -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_puts_make_consecutive_versions(demo, api):
    # given 16 clients, each with other rules
    factories.user_create("opal", merchant=demo, role=Role.OPERATOR)
    clients = [api("opal") for _ in range(16)]
    amounts = [f"{index + 1}.00" for index in range(16)]

    # when they all PUT at once, from real threads
    answers = in_threads(
        [
            lambda client=client, amount=amount: put(
                client, {**RULES, "auto_approve_up_to": amount}
            )
            for client, amount in zip(clients, amounts, strict=True)
        ]
    )

    # then each made one version: 1..16, no gap, no number twice, each amount once
    assert [answer.status_code for answer in answers] == [200] * 16
    assert sorted(answer.json()["version"] for answer in answers) == list(range(1, 17))
    assert versions() == list(range(1, 17))
    rows = ApprovalPolicyVersion.objects.all()
    assert sorted(str(row.auto_approve_up_to) for row in rows) == sorted(amounts)
    # and the current version is the last one written
    policy = ApprovalPolicy.objects.get(merchant=demo)
    assert policy.current.version == 16
    last = next(answer.json() for answer in answers if answer.json()["version"] == 16)
    assert str(policy.current.auto_approve_up_to) == last["auto_approve_up_to"]
