"""The tickets API: who sees and does what, bad input, and a plan nobody finishes in time."""

from datetime import timedelta

import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import BusinessEvent, Order, OrderStatus, Ticket, TicketStatus
from runs import services
from runs.models import AgentRun, RunStatus
from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of
from tests.problems import assert_problem


def test_a_customer_cannot_confirm_someone_elses_ticket_nor_review(demo, api):
    ticket = ticket_of(exchange_run(demo))

    other = command(api("bob"), ticket, "confirm")
    other_read = api("bob").get(f"/api/v1/tickets/{ticket.pk}")
    other_shop = command(api("oscar", merchant="other-shop"), ticket, "decide", decision="approve")
    review = command(api("alice"), ticket, "decide", decision="approve")
    supervisor_confirms = command(api("sam"), ticket, "confirm")

    assert_problem(other, 404, "not_found")
    assert_problem(other_read, 404, "not_found")
    assert_problem(other_shop, 404, "not_found")
    assert_problem(review, 403, "permission_denied")
    assert_problem(supervisor_confirms, 403, "permission_denied")
    assert Ticket.objects.get().status == TicketStatus.WAITING_CONFIRMATION
    assert BusinessEvent.objects.filter(kind="proposed").count() == 1
    assert BusinessEvent.objects.count() == 1


def test_the_ticket_representation_and_lists_per_role(demo, api):
    run = exchange_run(demo)
    bobs = exchange_run(
        demo, "I want to exchange the shoes from order ORD-2001 for size 43", customer="bob"
    )
    command(api("alice"), ticket_of(run), "confirm")

    body = api("alice").get(f"/api/v1/tickets/{ticket_of(run).pk}").json()
    mine = api("alice").get("/api/v1/tickets").json()["results"]
    everyone = api("sam").get("/api/v1/tickets").json()["results"]
    waiting = api("sam").get("/api/v1/tickets?status=WAITING_REVIEW").json()["results"]
    bad = api("sam").get("/api/v1/tickets?status=DONE")

    assert body["run_id"] == str(run.pk)
    assert body["order_id"] == "ORD-1002"
    assert body["status"] == "WAITING_REVIEW"
    assert body["proposal"]["version"] == 1
    assert body["proposal"]["items"] == [
        {"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-43", "quantity": 1}
    ]
    assert body["confirmation"]["confirmed_by"] == "alice"
    assert body["review"] is None
    assert [t["id"] for t in mine] == [body["id"]]
    assert {t["id"] for t in everyone} == {body["id"], str(ticket_of(bobs).pk)}
    assert [t["id"] for t in waiting] == [body["id"]]
    assert_problem(bad, 400, "validation_error")


def test_the_ticket_list_costs_the_same_queries_at_any_size(demo, api):
    sam = api("sam")
    exchange_run(demo)
    with CaptureQueriesContext(connection) as one:
        sam.get("/api/v1/tickets")
    for customer, order in (("alice", "ORD-1002"), ("bob", "ORD-2001")):
        exchange_run(demo, f"exchange the shoes of {order} for size 43", customer=customer)
    with CaptureQueriesContext(connection) as three:
        assert len(sam.get("/api/v1/tickets").json()["results"]) == 3
    assert len(three.captured_queries) == len(one.captured_queries)


ITEM = {"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-43", "quantity": 1}


def test_bad_command_bodies_are_400_and_change_nothing(demo, api):
    ticket = ticket_of(exchange_run(demo))
    alice, sam = api("alice"), api("sam")

    cases = [
        (alice, "confirm", {"proposal_version": "1"}, "proposal_version"),
        (alice, "confirm", {"proposal_version": 1, "extra": True}, "extra"),
        (alice, "revise", {"proposal_version": 1, "items": []}, "items"),
        (sam, "revise", {"proposal_version": 1, "note": "x"}, "items"),
        (
            sam,
            "revise",
            {"proposal_version": 1, "items": [{"sku": "SHOE-TRAIL-42"}]},
            "items.0.new_sku",
        ),
        (
            sam,
            "revise",
            {"proposal_version": 1, "items": [{"sku": "HAT", "new_sku": "HAT-2", "quantity": 1}]},
            "items",
        ),
        (sam, "decide", {"proposal_version": 1, "decision": "maybe"}, "decision"),
        (sam, "revise", {"proposal_version": 1, "items": []}, "items"),
        (sam, "revise", {"proposal_version": 1, "items": [ITEM] * 11}, "items"),
        (
            sam,
            "revise",
            {"proposal_version": 1, "items": [{**ITEM, "new_sku": "HEADPHONES-BLACK"}]},
            "items",
        ),
    ]
    for client, action, body, field in cases:
        response = client.post(f"/api/v1/tickets/{ticket.pk}/{action}", body, format="json")
        problem = assert_problem(response, 400, "validation_error")
        assert field in {error["field"] for error in problem["errors"]}, (body, problem)
    missing = api("alice").post(
        f"/api/v1/tickets/{ticket.pk}/confirm", "{", content_type="application/json"
    )
    assert_problem(missing, 400, "validation_error")
    assert ticket_of(ticket.run).status == TicketStatus.WAITING_CONFIRMATION
    assert BusinessEvent.objects.count() == 1


def test_a_revision_for_an_order_no_longer_delivered_is_refused(demo, api):
    # given: a plan, then its order is cancelled
    ticket = ticket_of(exchange_run(demo))
    Order.objects.filter(pk=ticket.order_id).update(status=OrderStatus.CANCELLED)

    # when
    response = command(api("sam"), ticket, "revise", items=[ITEM])

    # then
    problem = assert_problem(response, 400, "validation_error")
    assert problem["detail"] == "only delivered orders can be exchanged"
    assert BusinessEvent.objects.count() == 1


def test_a_plan_nobody_confirms_in_24_hours_fails_the_run_and_closes_the_ticket(demo, api):
    run = exchange_run(demo)
    ticket = ticket_of(run)

    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        assert services.maintain()["waits_expired"] == 1
        late = command(api("alice"), ticket, "confirm")

    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "WAIT_EXPIRED")
    assert ticket_of(run).status == TicketStatus.CANCELLED
    assert_problem(late, 409, "invalid_transition")


def test_a_damaged_wait_is_left_to_an_operator_not_expired(demo):
    # given: a plan wait whose stored state was damaged
    run = exchange_run(demo)
    AgentRun.objects.filter(pk=run.pk).update(wait_state={**run.wait_state, "ticket_id": None})

    # when: its deadline passes
    with time_machine.travel(timezone.now() + timedelta(hours=24, seconds=1)):
        report = services.maintain()

    # then: nothing failed it behind anyone's back
    run.refresh_from_db()
    assert report["waits_expired"] == 0
    assert run.status == RunStatus.WAITING_USER
    assert ticket_of(run).status == TicketStatus.WAITING_CONFIRMATION


def test_maintain_reconciles_what_a_lost_task_missed(demo, api):
    # given: a confirmation whose reconcile task message was lost
    run = exchange_run(demo)
    command(api("alice"), ticket_of(run), "confirm")

    # when: the once-a-minute sweep runs
    report = services.maintain()

    # then: it applied the event
    run.refresh_from_db()
    assert report["plans_reconcile_due"] == 1
    assert run.status == RunStatus.WAITING_APPROVAL
    assert reconcile(run) == 0
