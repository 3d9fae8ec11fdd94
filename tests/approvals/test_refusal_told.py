"""A tool that refuses an approved call (DESIGN 6.1.1): the call is FAILED with the tool's
reason, never EXECUTED; the API, the pages, the timeline and the metrics say so, and the
customer is told in the chat and by email alike that the refund could not be made. Only the
refund ledger's rows are ever shown as paid."""

from decimal import Decimal

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from approvals import tasks
from approvals.models import Approval, ApprovalStatus, Order, Refund
from runs import services, worker
from runs.models import AgentRun, RunEvent, RunStatus, ToolExecution, ToolStatus
from runs.snapshot import snapshot_parse
from tests.approvals.refund_helpers import execute_approved_refund
from tests.pages import page_text, signed_in
from tests.runs.helpers import run_claim

pytestmark = pytest.mark.django_db

ASKED = "I want a refund for ORD-2002 amount 20"
REFUSAL = (
    "Demo Shop approved 1000.00 EUR instead of 20.00 EUR for ORD-2002, but the refund could "
    "not be made: only 129.00 EUR of ORD-2002 is left to refund, not 1000.00 EUR."
)
METRICS_TOKEN = "scrape-token-for-tests"


def _asked(bob: Client, text: str = ASKED) -> Approval:
    bob.post("/portal/chat/", {"text": text})
    worker.tick()
    return Approval.objects.filter(status=ApprovalStatus.PENDING_APPROVAL).get()


@pytest.fixture
def refused(demo, api, django_capture_on_commit_callbacks) -> Approval:
    """bob asked for 20.00 on his 129.00 headphones; sam revised it to 1000.00 and the
    worker carried it out: the refund tool refused."""
    bob = signed_in("bob")
    approval = _asked(bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = api("sam").post(
            f"/api/v1/runs/{approval.run_id}/resume",
            {
                "interrupt_id": approval.interrupt_id,
                "decision": "revise",
                "tool_args": {**approval.proposed_args, "amount": "1000.00"},
            },
            format="json",
        )
        assert response.status_code == 200, response.content
        worker.tick()
    tasks.deliver()
    return Approval.objects.get(pk=approval.pk)


def test_the_call_is_failed_with_the_tools_reason_and_nothing_was_paid(refused):
    run = AgentRun.objects.get(pk=refused.run_id)

    assert run.status == RunStatus.COMPLETED, (run.status, run.error_code, run.error_detail)
    assert refused.status == ApprovalStatus.FAILED
    assert refused.executed_args["amount"] == "1000.00"
    assert refused.result["status"] == "failed"
    assert "only 129.00 EUR of ORD-2002 is left to refund" in refused.result["error"]
    assert not Refund.objects.exists()
    assert Order.objects.get(number="ORD-2002").refunded == Decimal("0.00")
    execution = ToolExecution.objects.get(idempotency_key=refused.tool_execution_key)
    assert (execution.status, execution.result) == (ToolStatus.FAILED, refused.result)
    assert snapshot_parse(run.state_snapshot).pending_tool_call.status == "FAILED"


def test_the_api_says_failed_and_a_late_decision_is_refused(refused, api):
    sam = api("sam")

    shown = sam.get(f"/api/v1/approvals/{refused.interrupt_id}").json()
    listed = sam.get("/api/v1/approvals?status=FAILED").json()["results"]
    executed = sam.get("/api/v1/approvals?status=EXECUTED").json()["results"]
    late = api("sue").post(
        f"/api/v1/approvals/{refused.interrupt_id}/decision", {"decision": "approve"}, format="json"
    )

    assert shown["status"] == "FAILED"
    assert "only 129.00 EUR of ORD-2002 is left to refund" in shown["result"]["error"]
    assert [item["interrupt_id"] for item in listed] == [refused.interrupt_id]
    assert executed == []
    assert late.status_code == 409
    assert late.json()["code"] == "already_decided"


def test_the_chat_answer_and_the_email_tell_the_refusal_and_no_refund(refused, mailoutbox):
    run = AgentRun.objects.get(pk=refused.run_id)
    page = page_text(signed_in("bob").get("/portal/chat/"))

    # the assistant's answer and the shop's word both say it could not be made
    assert run.result.startswith("The refund of 1000.00 EUR for order ORD-2002 could not be made")
    assert "only 129.00 EUR of ORD-2002 is left to refund" in run.result
    assert REFUSAL in page
    assert "refunded" not in run.result + page
    # the last email says the same as the chat, and no email says money moved
    to_bob = [email for email in mailoutbox if email.to == ["bob@example.com"]]
    assert len(to_bob) == 2
    told = to_bob[-1]
    assert told.subject == "Your refund of 1000.00 EUR for ORD-2002 could not be made"
    assert REFUSAL in told.body
    assert not [email for email in mailoutbox if "refunded" in email.subject + email.body]


def test_the_email_is_written_once_however_often_the_call_is_looked_at(refused, mailoutbox):
    tasks.deliver()

    assert len([email for email in mailoutbox if email.to == ["bob@example.com"]]) == 2


def test_a_later_call_on_the_order_does_not_list_the_refused_amount_as_paid(refused):
    # given bob asks again on the same order
    later = _asked(signed_in("bob"), "I want a refund for ORD-2002 amount 10")

    # when sam opens it
    page = page_text(signed_in("sam").get(f"/portal/approvals/{later.interrupt_id}/"))

    # then the refused 1000.00 is listed as refused, nothing as paid
    assert '<dt>Already refunded</dt><dd class="amount">0.00 EUR</dd>' in page
    assert '<td data-label="Amount" class="amount">1000.00 EUR</td>' in page
    assert '<td data-label="Status">refused when carried out, not paid</td>' in page
    assert '<td data-label="Status">paid</td>' not in page


def test_the_call_page_and_the_timeline_say_the_tool_refused(refused):
    page = page_text(signed_in("sam").get(f"/portal/approvals/{refused.interrupt_id}/"))
    [result] = RunEvent.objects.filter(
        run_id=refused.run_id, type="tool.result", data__tool="issue_refund"
    )

    assert '<strong id="approval-status">FAILED</strong>' in page
    assert "The tool refused to carry it out: only 129.00 EUR of ORD-2002" in page
    assert result.data["status"] == ToolStatus.FAILED
    assert "issue_refund failed: only 129.00 EUR of ORD-2002 is left to refund" in page


def test_the_admin_lists_and_filters_the_refused_call(refused):
    sam = signed_in("sam")

    failed = page_text(sam.get("/admin/approvals/approval/?status__exact=FAILED"))
    executed = page_text(sam.get("/admin/approvals/approval/?status__exact=EXECUTED"))

    assert refused.interrupt_id in failed and "Failed: the tool refused" in failed
    assert refused.interrupt_id not in executed


def test_the_metrics_count_the_refused_call(refused, settings):
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "METRICS_TOKEN": METRICS_TOKEN}

    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    assert samples[("agentportal_approvals_refused", (("shop", "demo-shop"),))] == 1


def test_a_refusal_whose_run_stops_before_reporting_it_is_still_told_as_a_refusal(demo, api):
    # given bob's 20.00 revised to 1000.00, which a worker carries out (the tool refuses) and
    # is stopped before it commits its step
    approval = _asked(signed_in("bob"))
    revised = {**approval.proposed_args, "amount": "1000.00"}
    api("sam").post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": "revise", "tool_args": revised},
        format="json",
    )
    lease = run_claim()
    execute_approved_refund(lease)

    # when the run is stopped
    services.run_cancel(run=AgentRun.objects.get(pk=lease.run_id), reason="/stop")

    # then the call stays FAILED, the timeline says so before the end, and bob reads the
    # refusal, nothing about a refund carried out
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.FAILED
    types = list(
        RunEvent.objects.filter(run_id=lease.run_id).order_by("seq").values_list("type", flat=True)
    )
    assert types[-2:] == ["approval.failed", "run.cancelled"]
    page = page_text(signed_in("bob").get("/portal/chat/"))
    assert REFUSAL in page
    assert "carried out" not in page and "refunded" not in page
    assert not Refund.objects.exists()
