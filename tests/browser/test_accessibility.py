"""axe-core, run in each page people use, finds nothing serious or critical (WCAG 2.2 AA:
contrast, labels, names, landmarks). Its script comes from the npm package's build that a
pinned test dependency carries; nothing is downloaded."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.gate import escalation, services
from approvals.models import Approval, DecisionLink, Ticket
from runs import worker
from tests import factories
from tests.approvals.plan_helpers import exchange_run
from tests.approvals.policy_helpers import approval_of, big_order, policy_set, refund_run
from tests.browser.accessibility import serious_violations

pytestmark = pytest.mark.django_db(transaction=True)


def _link(approval, username: str, decision: str) -> str:
    """The token of the link `username`'s email carries to decide the call so."""
    return DecisionLink.objects.get(
        approval=approval, user__username=username, decision=decision
    ).token


def test_the_pages_have_no_serious_accessibility_violations(demo, browser, signed_in, live_server):
    # given a refund waiting for a supervisor and a plan waiting for its customer
    factories.run_queue(
        customer=User.objects.get(username="alice"),
        merchant=demo,
        message="I want a refund for ORD-1003 amount 20",
    )
    worker.tick()
    approval = Approval.objects.get()
    ticket = Ticket.objects.get(run=exchange_run(demo))
    visitor = browser.new_page()
    visitor.goto(f"{live_server.url}/accounts/login/")
    alice, sam = signed_in("alice"), signed_in("sam")
    pages = {
        "login": (visitor, "/accounts/login/"),
        "chat": (alice, "/portal/chat/"),
        "plan (customer)": (alice, f"/portal/tickets/{ticket.pk}/"),
        "inbox": (sam, "/portal/"),
        "approval": (sam, f"/portal/approvals/{approval.interrupt_id}/"),
        "plan (supervisor)": (sam, f"/portal/tickets/{ticket.pk}/"),
        "plan revision": (sam, f"/portal/tickets/{ticket.pk}/revise/"),
        "earlier requests": (alice, "/portal/requests/"),
        "away": (sam, "/portal/away/"),
        "decision link": (visitor, f"/portal/decide/{_link(approval, 'sue', 'reject')}/"),
    }

    # when axe audits each of them
    found, titles = {}, {}
    for name, (page, path) in pages.items():
        page.goto(f"{live_server.url}{path}")
        found[name] = serious_violations(page)
        titles[name] = page.title()
    visitor.close()

    # then nothing serious, and each page's title says what it is
    assert found == {name: [] for name in pages}
    assert titles == {
        "login": "Sign in · Agent Portal",
        "chat": "Chat · Agent Portal",
        "plan (customer)": "Exchange plan for ORD-1002 · Agent Portal",
        "inbox": "Inbox · Agent Portal",
        "approval": "Refund of 20.00 EUR on ORD-1003 · Agent Portal",
        "plan (supervisor)": "Exchange plan for ORD-1002 · Agent Portal",
        "plan revision": "Revise the plan for ORD-1002 · Agent Portal",
        "earlier requests": "Your requests · Agent Portal",
        "away": "Away · Agent Portal",
        "decision link": "Reject 20.00 EUR? · Agent Portal",
    }


def test_the_four_eyes_pages_have_no_serious_accessibility_violations(demo, signed_in, live_server):
    # given an escalated 500.00 refund that needs two supervisors, approved by sam
    policy_set(demo, two_approvers_from="200.00", escalate_after_seconds=600)
    big_order(demo)
    approval = approval_of(refund_run(demo, "500", order="ORD-9001"))
    Approval.objects.filter(pk=approval.pk).update(
        escalate_at=timezone.now() - timedelta(seconds=1)
    )
    assert escalation.approval_escalate(interrupt_id=approval.interrupt_id)
    services.approval_decide_as_user(
        approval=approval, user=User.objects.get(username="sam"), decision="approve"
    )
    sam, sue = signed_in("sam"), signed_in("sue")
    call = f"/portal/approvals/{approval.interrupt_id}/"
    pages = {
        "inbox (approved once)": (sam, "/portal/"),
        "call (approved by me)": (sam, call),
        "inbox (the second supervisor)": (sue, "/portal/"),
        "call (the second supervisor)": (sue, call),
    }

    found = {}
    for name, (page, path) in pages.items():
        page.goto(f"{live_server.url}{path}")
        found[name] = serious_violations(page)

    assert found == {name: [] for name in pages}
