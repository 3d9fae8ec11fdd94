"""Data migrations keep what approvals already stored honest."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("approvals", "0008_approval_policies")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _call(interrupt_id: str, result: dict) -> dict:
    now = timezone.now().isoformat()
    return {
        "interrupt_id": interrupt_id,
        "tool_name": "issue_refund",
        "tool_args": {"order_id": "ORD-1", "amount": "5.00", "reason": "r"},
        "status": "EXECUTED",
        "expires_at": now,
        "decision": "approve",
        "result": result,
        "updated_at": now,
    }


def test_a_refusal_stored_as_executed_becomes_failed_in_its_approval_and_its_snapshot():
    # given two calls of one turn stored before the upgrade: one paid, one the tool refused
    old = _migrate(BEFORE)
    shop = old.get_model("agentportal", "Merchant").objects.create(slug="old", name="Old")
    alice = old.get_model("auth", "User").objects.create(username="old-alice")
    paid = {"status": "executed", "amount": "5.00"}
    refused = {"status": "failed", "error": "only 1.00 of ORD-1 is left to refund, not 5.00"}
    run = old.get_model("runs", "AgentRun").objects.create(
        merchant=shop,
        account=alice,
        state_snapshot={
            "version": 3,
            "pending_tool_calls": [_call("int-paid", paid), _call("int-refused", refused)],
            "run_context": {"thread_id": "t", "run_id": "r"},
        },
    )
    Approval = old.get_model("approvals", "Approval")
    for interrupt_id, result in (("int-paid", paid), ("int-refused", refused)):
        Approval.objects.create(
            interrupt_id=interrupt_id,
            run=run,
            merchant=shop,
            tool_name="issue_refund",
            tool_execution_key=f"agent:{run.pk}:1:{interrupt_id}",
            proposed_args={},
            status="EXECUTED",
            result=result,
            expires_at=timezone.now(),
        )

    # when the project is migrated to its latest state
    new = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    # then the refused call is FAILED in both records; the paid one is left as it was
    statuses = dict(
        new.get_model("approvals", "Approval").objects.values_list("interrupt_id", "status")
    )
    assert statuses == {"int-paid": "EXECUTED", "int-refused": "FAILED"}
    snapshot = new.get_model("runs", "AgentRun").objects.get(pk=run.pk).state_snapshot
    assert [call["status"] for call in snapshot["pending_tool_calls"]] == ["EXECUTED", "FAILED"]


def test_both_old_outboxes_become_one_with_their_history():
    # given a delivered webhook and a customer email waiting for its second attempt
    old = _migrate([("approvals", "0009_approval_failed")])
    shop = old.get_model("agentportal", "Merchant").objects.create(slug="old", name="Old")
    bob = old.get_model("auth", "User").objects.create(username="old-bob", email="bob@shop.test")
    sent_at = timezone.now() - timezone.timedelta(days=2)
    old.get_model("approvals", "WebhookDelivery").objects.create(
        merchant=shop,
        event="approval.requested",
        payload={"event": "approval.requested", "interrupt_id": "int-1"},
        url="https://hooks.shop.test/in",
        status="DELIVERED",
        attempts=1,
        next_attempt_at=sent_at,
        delivered_at=sent_at,
    )
    old.get_model("approvals", "CustomerEmail").objects.create(
        merchant=shop,
        recipient=bob,
        key="decision:int-1",
        subject="Old Shop approved your refund",
        body="Hello old-bob",
        status="PENDING",
        attempts=1,
        next_attempt_at=sent_at,
        last_error="OSError: mail server down",
    )

    # when the project is migrated to its latest state
    new = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    # then each is a delivery of the one outbox, as it was
    rows = new.get_model("approvals", "Delivery").objects.order_by("transport")
    assert [
        (d.transport, d.event, d.key, d.recipient, d.status, d.attempts, d.last_error) for d in rows
    ] == [
        (
            "email",
            "customer.decision",
            "decision:int-1",
            "bob@shop.test",
            "PENDING",
            1,
            "OSError: mail server down",
        ),
        ("webhook", "approval.requested", None, "https://hooks.shop.test/in", "DELIVERED", 1, ""),
    ]
    email, webhook = rows
    assert (email.subject, email.payload) == (
        "Old Shop approved your refund",
        {"body": "Hello old-bob"},
    )
    assert webhook.payload == {"event": "approval.requested", "interrupt_id": "int-1"}
    assert webhook.delivered_at == sent_at


def test_policies_written_with_two_approvers_from_get_the_band_it_stands_for():
    # given two versions of a policy from before bands: four eyes from 200.00, then none
    old = _migrate([("approvals", "0014_absences")])
    shop = old.get_model("agentportal", "Merchant").objects.create(slug="old", name="Old")
    policy = old.get_model("approvals", "ApprovalPolicy").objects.create(
        merchant=shop, tool_name="issue_refund"
    )
    Version = old.get_model("approvals", "ApprovalPolicyVersion")
    Version.objects.create(
        policy=policy, version=1, amount_field="amount", two_approvers_from="200.00"
    )
    Version.objects.create(policy=policy, version=2, amount_field="amount")

    # when the project is migrated to its latest state
    new = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    # then the first has the shorthand's one band, the second none; the shorthand is kept
    versions = new.get_model("approvals", "ApprovalPolicyVersion").objects.order_by("version")
    assert [(str(v.two_approvers_from), v.approver_bands) for v in versions] == [
        ("200.00", [{"from": "200.00", "approvals": 2, "group": None}]),
        ("None", []),
    ]
