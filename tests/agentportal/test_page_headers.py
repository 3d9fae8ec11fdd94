"""Pages carry a Content-Security-Policy without inline scripts, and pages that show decisions,
plans or chats are never stored by a cache."""

import pytest
from django.contrib.auth.models import User

from approvals.models import Approval
from runs import worker
from tests import factories
from tests.pages import signed_in

pytestmark = pytest.mark.django_db


def _script_src(response) -> str:
    policy = response["Content-Security-Policy"]
    return next(part for part in policy.split(";") if part.strip().startswith("script-src"))


def test_the_decision_and_chat_pages_forbid_inline_scripts_and_caching(demo):
    alice = User.objects.get(username="alice")
    run = factories.run_queue(
        customer=alice, merchant=demo, message="I want a refund for ORD-1003 amount 20"
    )
    worker.tick()
    approval = Approval.objects.get(run=run)

    client = signed_in("sam")
    decision = client.get(f"/portal/approvals/{approval.interrupt_id}/")
    inbox = client.get("/portal/")
    client = signed_in(alice)
    chat = client.get("/portal/chat/")

    for page in (decision, inbox, chat):
        assert page.status_code == 200
        assert _script_src(page).split() == ["script-src", "'self'"]
        assert "frame-ancestors 'none'" in page["Content-Security-Policy"]
        assert "no-store" in page["Cache-Control"]


def test_the_login_page_has_the_policy_too(client):
    page = client.get("/accounts/login/")

    assert "'unsafe-inline'" not in _script_src(page)
