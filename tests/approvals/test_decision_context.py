"""What a supervisor sees to decide a call: the warnings the domain computes, the approval
page's account of the order and the conversation, and the inbox's order."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Approval, Order, Proposal
from approvals.shop.refund_review import numbers_written, refund_warnings
from runs import conversations, worker
from tests.approvals.plan_helpers import command, exchange_run, ticket_of
from tests.approvals.refund_helpers import refund_run_waiting
from tests.pages import inbox_rows, signed_in


def _order(total: str, refunded: str = "0.00", number: str = "ORD-1004") -> Order:
    return Order(number=number, total=Decimal(total), refunded=Decimal(refunded))


# --- the warnings ------------------------------------------------------------------------------


def test_a_refund_above_what_is_still_refundable_warns():
    # given a 149.00 order and a customer who asked for 200
    order = _order("149.00")

    # when a refund of 200.00 is checked
    warnings = refund_warnings(
        order_number="ORD-1004",
        order=order,
        amount=Decimal("200.00"),
        customer_texts=["I want a refund for ORD-1004 amount 200"],
    )

    # then the one warning says what is refundable and that it would fail
    assert warnings == [
        "The refund of 200.00 EUR is more than the 149.00 EUR still refundable on ORD-1004 "
        "(total 149.00 EUR, 0.00 EUR refunded already). Approved as it is, it will fail."
    ]


def test_what_was_refunded_already_counts():
    # given a 149.00 order of which 100.00 was refunded
    order = _order("149.00", refunded="100.00")

    # when a refund of 60 is checked, which the customer asked for
    warnings = refund_warnings(
        order_number="ORD-1004", order=order, amount=Decimal("60"), customer_texts=["60 please"]
    )

    # then it warns: only 49.00 is left
    assert len(warnings) == 1
    assert "more than the 49.00 EUR still refundable" in warnings[0]


def test_an_amount_the_customer_never_wrote_warns_and_names_what_they_wrote():
    # given a customer who asked for 20 on ORD-1003
    texts = ["Hi, I want a refund for ORD-1003", "amount 20, the shirt is torn"]

    # when the agent proposes 25.00
    warnings = refund_warnings(
        order_number="ORD-1003",
        order=_order("59.00", number="ORD-1003"),
        amount=Decimal("25.00"),
        customer_texts=texts,
    )

    # then the warning names the amount and the numbers they did write (not the order's)
    assert warnings == [
        "The customer never wrote 25.00 in their messages (the numbers they wrote: 20)."
    ]


def test_an_amount_when_the_customer_named_none_warns_that_the_agent_chose_it():
    warnings = refund_warnings(
        order_number="ORD-1004",
        order=_order("149.00"),
        amount=Decimal("149.00"),
        customer_texts=["I want a refund for ORD-1004"],
    )

    assert warnings == [
        "The customer named no amount in their messages: 149.00 EUR is the agent's choice."
    ]


def test_a_refund_the_customer_asked_for_within_the_order_has_no_warning():
    warnings = refund_warnings(
        order_number="ORD-1003",
        order=_order("59.00", number="ORD-1003"),
        amount=Decimal("20.00"),
        customer_texts=["I want a refund for ORD-1003 amount 20"],
    )

    assert warnings == []


def test_other_refunds_still_open_on_the_order_count_against_what_is_left():
    # given 50.00 of a 59.00 order already waiting for a decision in another call
    warnings = refund_warnings(
        order_number="ORD-1003",
        order=_order("59.00", number="ORD-1003"),
        amount=Decimal("20.00"),
        customer_texts=["refund ORD-1003 amount 20"],
        open_amounts=[Decimal("50.00")],
    )

    assert warnings == [
        "Other refunds of 50.00 EUR on ORD-1003 are waiting or approved: with this one they "
        "come to more than the 59.00 EUR still refundable."
    ]


def test_an_unknown_order_warns_that_nothing_can_be_paid():
    warnings = refund_warnings(
        order_number="ORD-7777", order=None, amount=Decimal("5"), customer_texts=["ORD-7777 5"]
    )

    assert warnings == [
        "ORD-7777 is not an order of this customer in this shop: the refund cannot be paid."
    ]


def test_numbers_are_read_as_written_with_a_comma_or_a_point_and_not_from_order_numbers():
    assert numbers_written(["ORD-1003: 12,50 or 12.50 or €7, size 43", "ORD-1003 again 7"]) == [
        "12,50",
        "12.50",
        "7",
        "43",
    ]


# --- the approval page -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_approval_page_shows_the_order_what_is_refundable_and_the_warning(demo):
    # given a refund of 200.00 asked for on alice's 149.00 rain jacket
    approval = refund_run_waiting("I want a refund for ORD-1004 amount 200").approval

    # when sam opens its page
    page = signed_in("sam").get(f"/portal/approvals/{approval.interrupt_id}/")

    # then he reads the call, the order's items and money, and the warning
    text = re.sub(r"\s+", " ", page.content.decode())
    assert page.status_code == 200
    assert "<h1>Refund of 200.00 EUR on ORD-1004</h1>" in text
    assert "<dt>Amount</dt><dd>200.00 EUR</dd>" in text
    assert 'Rain jacket <span class="muted">JACKET-RAIN-40</span>' in text
    assert '<dt>Still refundable</dt><dd class="amount">149.00 EUR</dd>' in text
    assert "is more than the 149.00 EUR still refundable on ORD-1004" in text
    assert "I want a refund for ORD-1004 amount 200" in text


@pytest.mark.django_db
def test_the_approval_page_lists_earlier_refunds_and_says_when_nothing_looks_off(demo):
    # given a refund of 20 on ORD-1003 paid, and a second one asked for
    first = refund_run_waiting("I want a refund for ORD-1003 amount 20").approval
    sam = signed_in("sam")
    sam.post(f"/portal/approvals/{first.interrupt_id}/", {"action": "approve"})
    worker.tick()
    second = refund_run_waiting("refund ORD-1003 amount 9.50").approval

    # when sam opens the second one
    page = sam.get(f"/portal/approvals/{second.interrupt_id}/")

    # then the first is listed as paid, the money adds up and there is nothing to warn about
    text = re.sub(r"\s+", " ", page.content.decode())
    assert '<td data-label="Amount" class="amount">20.00 EUR</td>' in text
    assert '<td data-label="Status">paid</td>' in text
    assert '<dt>Already refunded</dt><dd class="amount">20.00 EUR</dd>' in text
    assert 'id="no-warnings"' in text


@pytest.mark.django_db
def test_the_page_shows_the_whole_conversation_in_order_with_the_assistants_answers(demo):
    # given alice asked a question, got an answer, then asked for a refund
    alice = User.objects.get(username="alice")
    conversation = conversations.conversation_create(merchant=demo, customer=alice)
    conversations.message_send(conversation=conversation, text="Where is ORD-1004?")
    worker.tick()
    conversations.message_send(conversation=conversation, text="refund ORD-1004 amount 200")
    worker.tick()
    approval = Approval.objects.get()

    # when sam opens the call
    page = signed_in("sam").get(f"/portal/approvals/{approval.interrupt_id}/")

    # then both her messages and the answer between them are there, in order, to the second
    text = page.content.decode()
    question = text.index("Where is ORD-1004?")
    answer = text.index('<li class="from-assistant">')
    refund = text.index("refund ORD-1004 amount 200")
    assert question < answer < refund
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text)


@pytest.mark.django_db
def test_a_call_on_an_order_the_customer_does_not_have_warns(demo):
    # given alice's refund naming bob's order (a model may skip looking the order up)
    approval = refund_run_waiting("I want a refund for ORD-1003 amount 10").approval
    Approval.objects.filter(pk=approval.pk).update(
        proposed_args={**approval.proposed_args, "order_id": "ORD-2001"}
    )

    page = signed_in("sam").get(f"/portal/approvals/{approval.interrupt_id}/")

    assert "ORD-2001 is not an order of this customer in this shop" in page.content.decode()


# --- the inbox ---------------------------------------------------------------------------------


@pytest.fixture
def three_refunds(demo) -> dict[str, Approval]:
    """Refunds of 20.00 (the oldest), 99.00 (the newest) and 30.00, waiting for sam."""
    refunds = {
        "20": refund_run_waiting("refund ORD-1003 amount 20").approval,
        "99": refund_run_waiting("refund ORD-2001 amount 99", customer="bob").approval,
        "30": refund_run_waiting("refund ORD-1004 amount 30").approval,
    }
    now = timezone.now()
    for minutes_ago, amount in ((30, "20"), (5, "99"), (10, "30")):
        Approval.objects.filter(pk=refunds[amount].pk).update(
            created_at=now - timedelta(minutes=minutes_ago)
        )
    return refunds


@pytest.mark.django_db
def test_the_inbox_lists_the_oldest_call_first_and_counts_them(three_refunds):
    sam = signed_in("sam")

    page = sam.get("/portal/")

    text = re.sub(r"\s+", " ", page.content.decode())
    ids = {amount: approval.interrupt_id for amount, approval in three_refunds.items()}
    assert inbox_rows(page) == [ids["20"], ids["30"], ids["99"]]
    assert '<span class="count" id="pending-count">(3)</span>' in text
    assert '<td data-label="Amount" class="amount">99.00 EUR</td>' in text
    assert '<td data-label="Order">ORD-2001</td>' in text


@pytest.mark.django_db
def test_the_inbox_sorts_by_amount_and_its_refreshed_rows_keep_that_order(three_refunds):
    sam = signed_in("sam")
    ids = {amount: approval.interrupt_id for amount, approval in three_refunds.items()}

    page = sam.get("/portal/?sort=amount")
    rows = sam.get("/portal/inbox/rows/?sort=amount")

    assert inbox_rows(page) == [ids["99"], ids["30"], ids["20"]]
    assert 'hx-get="/portal/inbox/rows/?sort=amount&amp;view=all"' in page.content.decode()
    assert inbox_rows(rows) == [ids["99"], ids["30"], ids["20"]]
    # the heading's count comes with the rows, swapped in out of band
    assert 'id="pending-count" hx-swap-oob="true">(3)<' in rows.content.decode()


@pytest.mark.django_db
def test_an_unknown_sort_is_the_default_order(three_refunds):
    ids = {amount: approval.interrupt_id for amount, approval in three_refunds.items()}

    rows = signed_in("sam").get("/portal/inbox/rows/?sort=nonsense")

    assert inbox_rows(rows) == [ids["20"], ids["30"], ids["99"]]


@pytest.mark.django_db
def test_a_plan_waiting_for_review_reads_as_its_exchange_in_the_inbox(demo, api):
    # given alice confirmed the agent's plan to exchange her shoes
    ticket = ticket_of(exchange_run(demo))
    command(api("alice"), ticket, "confirm")

    # when sam looks at his plans
    rows = signed_in("sam").get("/portal/inbox/plans/").content.decode()

    # then the row says what is exchanged and how long it has waited
    assert Proposal.objects.get(ticket=ticket).summary in rows
    assert "confirmed, waiting for review" in rows
    assert "just now" in rows
