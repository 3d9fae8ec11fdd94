"""The portal's revise page: a supervisor proposes a plan's next version by picking sizes from
the shop's stock, through the same command as the admin and the API."""

import pytest
from django.test import Client

from approvals.models import BusinessEvent, Proposal, StockLevel, TicketStatus
from tests.approvals.plan_helpers import command, exchange_run, reconcile, ticket_of
from tests.pages import signed_in
from tests.threads import in_threads


def _propose(client: Client, ticket, *, size: str, version: int = 1, note: str = "", **line):
    """POST the revise form with one line: SHOE-TRAIL-42 for `size`."""
    return client.post(
        f"/portal/tickets/{ticket.pk}/revise/",
        {
            "proposal_version": version,
            "note": note,
            "lines-TOTAL_FORMS": 1,
            "lines-INITIAL_FORMS": 1,
            "lines-0-product": line.get("product", "SHOE-TRAIL-42"),
            "lines-0-size": size,
            "lines-0-quantity": line.get("quantity", 1),
        },
        follow=True,
    )


def test_the_page_offers_the_plans_sizes_in_words_and_the_customers_request(demo, api):
    # given: alice asked for changes to the plan the agent proposed (42 for 43)
    run = exchange_run(demo)
    ticket = ticket_of(run)
    command(api("alice"), ticket, "revise", note="Size 43 is too small, I need 44")

    # when
    page = signed_in("sam").get(f"/portal/tickets/{ticket.pk}/revise/")

    # then: every size of the shoe with its stock, the sold-out one not pickable
    assert page.status_code == 200
    assert "Trail running shoes, size 42</option>" in page.text
    assert "size 41 — 2 in stock" in page.text
    assert '<option value="SHOE-TRAIL-43" selected>size 43 — 7 in stock</option>' in page.text
    assert '<option value="SHOE-TRAIL-44" disabled>size 44 — out of stock</option>' in page.text
    assert "Size 43 is too small, I need 44" in page.text
    assert "Propose version 2" in page.text


def test_a_supervisor_proposes_version_2_as_the_admin_would(demo, api):
    # given: alice asked for changes
    run = exchange_run(demo)
    ticket = ticket_of(run)
    command(api("alice"), ticket, "revise", note="I need a smaller size")
    reconcile(run)

    # when: sam picks size 41 on the page
    page = _propose(signed_in("sam"), ticket, size="SHOE-TRAIL-41", note="41 it is")

    # then: a new version waits for alice, as after the admin's revision
    assert "Version 2 proposed" in page.text
    ticket.refresh_from_db()
    assert (ticket.status, ticket.version) == (TicketStatus.WAITING_CONFIRMATION, 2)
    proposal = Proposal.objects.get(ticket=ticket, version=2)
    assert proposal.items == [{"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-41", "quantity": 1}]
    assert (proposal.note, proposal.created_by.username) == ("41 it is", "sam")
    assert BusinessEvent.objects.filter(ticket=ticket, kind="revised").count() == 1
    reconcile(run)
    assert run.wait_state["payload"]["proposal_version"] == 2


def test_an_out_of_stock_size_is_refused_beside_the_field_and_nothing_is_written(demo):
    # given
    ticket = ticket_of(exchange_run(demo))
    sam = signed_in("sam")

    # when: size 44 (none in stock), then 41 for more than its stock and the order holds
    sold_out = _propose(sam, ticket, size="SHOE-TRAIL-44", note="keep this note")
    too_many = _propose(sam, ticket, size="SHOE-TRAIL-41", quantity=3)

    # then: each error is beside its field, the note kept, and the plan untouched
    assert sold_out.status_code == 200
    assert "Size 44 is out of stock: pick another size." in sold_out.text
    assert 'id="id_lines-0-size-errors"' in sold_out.text
    assert "keep this note</textarea>" in sold_out.text
    assert '<option value="SHOE-TRAIL-44" selected>' in sold_out.text
    assert "Only 2 of size 41 in stock." in too_many.text
    assert "The order holds only 1." in too_many.text
    ticket.refresh_from_db()
    assert ticket.version == 1
    assert Proposal.objects.filter(ticket=ticket).count() == 1


def test_a_broken_form_says_what_is_wrong_and_never_fails(demo):
    # given
    ticket = ticket_of(exchange_run(demo))
    sam = signed_in("sam")

    # when: a size of another product, an unknown product, and no lines at all
    other_product = _propose(sam, ticket, size="SHOE-CITY-43")
    unknown = _propose(sam, ticket, product="HAT-1", size="SHOE-TRAIL-41")
    no_lines = sam.post(f"/portal/tickets/{ticket.pk}/revise/", {"proposal_version": 1})

    # then
    assert "Select a valid choice. SHOE-CITY-43 is not one of the available" in other_product.text
    assert "Select a valid choice. HAT-1 is not one of the available" in unknown.text
    assert no_lines.status_code == 200
    assert "The form arrived incomplete; nothing was changed." in no_lines.text
    assert ticket_of(ticket.run).version == 1


def test_customers_and_other_shops_supervisors_get_404(demo):
    # given
    ticket = ticket_of(exchange_run(demo))
    url = f"/portal/tickets/{ticket.pk}/revise/"

    # when / then
    assert signed_in("alice").get(url).status_code == 404
    assert _propose(signed_in("alice"), ticket, size="SHOE-TRAIL-41").status_code == 404
    assert signed_in("bob").get(url).status_code == 404
    assert signed_in("oscar").get(url).status_code == 404
    assert _propose(signed_in("oscar"), ticket, size="SHOE-TRAIL-41").status_code == 404
    assert ticket_of(ticket.run).version == 1


def test_a_stale_version_is_refused_with_a_clear_message_and_nothing_overwritten(demo):
    # given: sue proposed version 2 while sam's page still showed version 1
    ticket = ticket_of(exchange_run(demo))
    _propose(signed_in("sue"), ticket, size="SHOE-TRAIL-41", note="sue's")

    # when
    page = _propose(signed_in("sam"), ticket, size="SHOE-TRAIL-43", version=1, note="sam's")

    # then: sam is told, shown sue's version with fresh pickers, and sue's version stands
    assert "The plan changed meanwhile: sue proposed version 2. Nothing was changed" in page.text
    assert 'name="proposal_version" value="2"' in page.text
    assert "Propose version 3" in page.text
    ticket.refresh_from_db()
    assert ticket.version == 2
    assert Proposal.objects.get(ticket=ticket, version=2).note == "sue's"
    assert not Proposal.objects.filter(ticket=ticket, version=3).exists()


def test_a_closed_plan_says_why_and_offers_no_form(demo, api):
    # given: an approved plan
    ticket = ticket_of(exchange_run(demo))
    command(api("alice"), ticket, "confirm")
    command(api("sam"), ticket, "decide", decision="approve")

    # when
    sam = signed_in("sam")
    page = sam.get(f"/portal/tickets/{ticket.pk}/revise/")
    posted = _propose(sam, ticket, size="SHOE-TRAIL-41")

    # then
    assert "This plan was approved" in page.text
    assert 'id="revise-form"' not in page.text
    assert posted.status_code == 200 and 'id="revise-form"' not in posted.text
    assert ticket_of(ticket.run).version == 1
    assert "/revise/" not in sam.get(f"/portal/tickets/{ticket.pk}/").text


def test_the_plan_page_links_the_supervisor_and_shows_both_people_the_diff(demo, api):
    # given: a plan revised from 43 to 41
    ticket = ticket_of(exchange_run(demo))
    sam = signed_in("sam")
    assert f"/portal/tickets/{ticket.pk}/revise/" in sam.get(f"/portal/tickets/{ticket.pk}/").text
    assert 'id="plan-diff"' not in sam.get(f"/portal/tickets/{ticket.pk}/").text
    _propose(sam, ticket, size="SHOE-TRAIL-41")

    # when
    pages = [signed_in(who).get(f"/portal/tickets/{ticket.pk}/").text for who in ("alice", "sam")]

    # then: both read what changed, in sizes; only the supervisor gets the revise link
    for page in pages:
        assert "<strong>Trail running shoes</strong>: size 43 → size 41" in page
    assert "What Demo Shop changed from the earlier plan" in pages[0]
    assert "version" not in pages[0].split('id="plan-diff"')[1].split("</div>")[0]
    assert "What changed from version 1 to version 2" in pages[1]
    assert "/revise/" not in pages[0]
    assert "/revise/" in pages[1]


@pytest.mark.django_db(transaction=True)
def test_two_supervisors_proposing_at_once_make_exactly_one_new_version(demo):
    # given: plenty of stock, and sam and sue on the same version 1
    StockLevel.objects.filter(sku="SHOE-TRAIL-41").update(quantity=9)
    ticket = ticket_of(exchange_run(demo))
    clients = [signed_in("sam"), signed_in("sue")] * 2

    # when: four proposals race
    pages = in_threads(
        [lambda c=c: _propose(c, ticket, size="SHOE-TRAIL-41").text for c in clients]
    )

    # then: one new version; everybody else was told it changed meanwhile
    assert sum("Version 2 proposed" in page for page in pages) == 1
    assert sum("The plan changed meanwhile" in page for page in pages) == 3
    ticket.refresh_from_db()
    assert ticket.version == 2
    assert Proposal.objects.filter(ticket=ticket).count() == 2
    assert BusinessEvent.objects.filter(ticket=ticket, kind="revised").count() == 1
