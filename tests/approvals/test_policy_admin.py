"""Approval policies in the admin: a shop's operators edit the rules, each changing save a new
version through the policy's one writer; supervisors and other shops' operators see nothing;
bad rules are form errors. And the approval page says who approved a call, under which
policy version."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.models import Merchant, Role
from approvals.gate.escalation import approval_escalate
from approvals.gate.services import approval_decide_as_user
from approvals.models import Approval, ApprovalPolicy, ApprovalPolicyVersion
from tests import factories
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.pages import signed_in

pytestmark = pytest.mark.django_db

POLICIES = "/admin/approvals/approvalpolicy/"
RULES = {
    "amount_field": "amount",
    "auto_approve_up_to": "10.00",
    "two_approvers_from": "200.00",
    "escalate_after_seconds": "600",
    "escalate_to_operators": "on",
    "escalate_to_email": "",
}


@pytest.fixture
def opal(demo):
    """An operator of the demo shop."""
    return factories.user_create("opal", merchant=demo, role=Role.OPERATOR)


def change_url(policy: ApprovalPolicy) -> str:
    return f"{POLICIES}{policy.pk}/change/"


def shown(page) -> dict[str, str]:
    """What a read-only admin page shows in each field, by field name."""
    return {
        field.field["name"]: str(field.contents())
        for fieldset in page.context["adminform"]
        for line in fieldset
        for field in line
    }


def versions() -> list[int]:
    return list(ApprovalPolicyVersion.objects.order_by("version").values_list("version", flat=True))


def test_an_operator_adds_a_policy_and_each_changing_save_is_a_new_version(demo, opal):
    client = signed_in(opal)

    # when opal adds the refund policy
    form = client.get(f"{POLICIES}add/")
    added = client.post(
        f"{POLICIES}add/", {"merchant": demo.pk, "tool_name": "issue_refund", **RULES}
    )

    # then version 1, written by her
    assert form.status_code == 200
    assert added.status_code == 302, added.context["adminform"].form.errors
    policy = ApprovalPolicy.objects.get(merchant=demo, tool_name="issue_refund")
    assert policy.current.version == 1
    assert policy.current.created_by == opal
    assert policy.current.auto_approve_up_to == Decimal("10.00")
    assert policy.current.escalate_after_seconds == 600

    # when she saves the same rules
    same = client.post(change_url(policy), RULES, follow=True)

    # then nothing new, and the page says so
    assert versions() == [1]
    assert "No rule changed: version 1 is still the current one." in same.text

    # when she changes one
    changed = client.post(change_url(policy), {**RULES, "two_approvers_from": "150"}, follow=True)

    # then version 2 holds it, version 1 is as it was, and the page lists both
    assert "Version 2 written." in changed.text
    assert versions() == [1, 2]
    policy.refresh_from_db()
    assert policy.current.two_approvers_from == Decimal("150.00")
    assert policy.current.created_by == opal
    assert ApprovalPolicyVersion.objects.get(version=1).two_approvers_from == Decimal("200.00")
    page = client.get(change_url(policy))
    assert page.status_code == 200
    assert "150.00" in page.text and "200.00" in page.text


def test_the_change_form_starts_from_the_current_version(demo, opal):
    policy = policy_set(demo, auto_approve_up_to="12.50", escalate_after_seconds=900)

    page = signed_in(opal).get(change_url(policy))

    form = page.context["adminform"].form
    assert form.initial["auto_approve_up_to"] == Decimal("12.50")
    assert form.initial["escalate_after_seconds"] == 900
    assert form.initial["two_approvers_from"] is None


def test_the_list_shows_each_policys_current_rules(demo, opal):
    policy_set(demo, auto_approve_up_to="10.00")
    policy_set(demo, auto_approve_up_to="25.00", two_approvers_from="300.00")

    page = signed_in(opal).get(POLICIES)

    assert page.status_code == 200
    assert "issue_refund" in page.text
    assert "25.00" in page.text and "300.00" in page.text
    assert "10.00" not in page.text


@pytest.mark.parametrize(
    ("rules", "field", "message"),
    [
        pytest.param(
            {"auto_approve_up_to": "300"},
            "two_approvers_from",
            "must be above auto_approve_up_to",
            id="inverted",
        ),
        pytest.param(
            {"amount_field": "price"},
            "amount_field",
            "one of issue_refund&#x27;s amounts: amount",
            id="no-such-argument",
        ),
        pytest.param(
            {"auto_approve_up_to": "-1"}, "auto_approve_up_to", "must not be negative", id="neg"
        ),
        pytest.param(
            {"escalate_after_seconds": "0"},
            "escalate_after_seconds",
            "at least 1 second",
            id="no-time",
        ),
    ],
)
def test_rules_that_do_not_fit_are_form_errors(demo, opal, rules, field, message):
    # given version 1
    policy = policy_set(demo, auto_approve_up_to="10.00", two_approvers_from="200.00")

    # when opal saves rules the policy's check refuses
    page = signed_in(opal).post(change_url(policy), {**RULES, **rules})

    # then the form again, with the refusal on its field, and nothing written
    assert page.status_code == 200
    assert field in page.context["adminform"].form.errors
    assert message in page.text
    assert versions() == [1]


def test_adding_a_second_policy_for_a_tool_is_a_form_error(demo, opal):
    policy_set(demo)

    page = signed_in(opal).post(
        f"{POLICIES}add/", {"merchant": demo.pk, "tool_name": "issue_refund", **RULES}
    )

    assert page.status_code == 200
    assert page.context["adminform"].form.errors
    assert ApprovalPolicy.objects.count() == 1 and versions() == [1]


def test_supervisors_neither_see_nor_edit_policies(demo):
    policy = policy_set(demo)
    sam = signed_in(User.objects.get(username="sam"))

    assert sam.get(POLICIES).status_code == 403
    assert sam.get(change_url(policy)).status_code == 403
    assert sam.get(f"{POLICIES}add/").status_code == 403
    assert sam.post(change_url(policy), {**RULES, "auto_approve_up_to": "99"}).status_code == 403
    assert "approvalpolicy" not in sam.get("/admin/").text
    assert versions() == [1]


def test_an_operator_of_another_shop_sees_none_of_ours(demo):
    # given demo-shop's policy and an operator of other-shop only
    policy = policy_set(demo, auto_approve_up_to="10.00")
    other = Merchant.objects.get(slug="other-shop")
    otto = signed_in(factories.user_create("otto", merchant=other, role=Role.OPERATOR))

    # when he looks
    listed = otto.get(POLICIES)
    page = otto.get(change_url(policy))
    form = otto.get(f"{POLICIES}add/")

    # then not listed, not found, and not a shop he can add one to
    assert listed.status_code == 200 and "issue_refund" not in listed.text
    assert page.status_code == 302
    merchants = form.context["adminform"].form.fields["merchant"].queryset
    assert list(merchants) == [other]


def test_a_superuser_sees_every_shops_policies(demo):
    policy_set(demo, auto_approve_up_to="10.00")
    policy_set(Merchant.objects.get(slug="other-shop"), auto_approve_up_to="7.00")

    page = signed_in(User.objects.get(username="admin")).get(POLICIES)

    assert page.status_code == 200
    assert "10.00" in page.text and "7.00" in page.text


# --- who approved a call -------------------------------------------------------------------


def test_the_approval_page_says_who_approved_under_which_policy_version(demo):
    # given a 500.00 refund that needs two people, approved by sam, escalated since
    policy = policy_set(demo, two_approvers_from="200.00", escalate_after_seconds=60)
    big_order(demo)
    approval = approval_of(refund_run(demo, "500", order="ORD-9001"))
    approval_decide_as_user(
        approval=approval, user=User.objects.get(username="sam"), decision="approve"
    )
    Approval.objects.filter(pk=approval.pk).update(
        escalate_at=timezone.now() - timedelta(seconds=1)
    )
    assert approval_escalate(interrupt_id=approval.interrupt_id)

    # when sue opens the call in the admin
    page = signed_in(User.objects.get(username="sue")).get(
        f"/admin/approvals/approval/{approval.pk}/change/"
    )

    # then: sam's approval, two needed, the policy's version, when it was escalated
    assert page.status_code == 200
    fields = shown(page)
    assert "<td>sam</td><td>approve</td>" in fields["approvals_given"]
    assert fields["required_approvals"] == "2"
    assert fields["policy"] == f"issue_refund policy, version 1 (policy:{policy.pk}@1)"
    assert fields["escalated_at"] != "-"
    assert fields["decided_by_whom"] == "-"


def test_the_approval_page_says_when_the_policy_approved_a_call_itself(demo):
    policy = policy_set(demo, auto_approve_up_to="10.00")
    approval = approval_of(refund_run(demo, "5"))

    page = signed_in(User.objects.get(username="sam")).get(
        f"/admin/approvals/approval/{approval.pk}/change/"
    )

    assert page.status_code == 200
    fields = shown(page)
    assert (
        fields["policy"] == f"issue_refund policy, version 1 (policy:{policy.pk}@1): approved by it"
    )
    assert fields["decided_by_whom"] == f"policy:{policy.pk}@1"
    assert fields["approvals_given"] == "-"
