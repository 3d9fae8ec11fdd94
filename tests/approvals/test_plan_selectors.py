"""A plan in people's words: the sizes a revision picks from, and what changed between
versions."""

from django.contrib.auth.models import User

from approvals.models import Proposal, Ticket
from approvals.plans.selectors import plan_diff, plan_product_choices
from approvals.portal.forms import PlanLineForm
from tests import factories
from tests.approvals.plan_helpers import exchange_run, ticket_of

SHOES = {"sku": "SHOE-TRAIL-42", "name": "Trail running shoes", "size": "42", "quantity": 1}
TEES = {"sku": "TEE-BASIC-M", "name": "Basic T-shirt", "size": "M", "quantity": 2}
HEADPHONES = {"sku": "HEAD-WX1", "name": "Wireless headphones", "size": "one size"}


def _order(demo, *items):
    return factories.order_create(
        merchant=demo,
        customer=User.objects.get(username="alice"),
        number="ORD-7001",
        items=[
            {**item, "unit_price": "10.00", "exchangeable": item is not HEADPHONES}
            for item in items
        ],
    )


def test_each_exchangeable_product_offers_its_sizes_in_order_with_their_stock(demo):
    # given: shoes and shirts in stock, headphones that cannot be exchanged
    for sku, quantity in (("TEE-BASIC-L", 1), ("TEE-BASIC-S", 0), ("TEE-BASIC-XL", 4)):
        factories.stock_create(merchant=demo, sku=sku, quantity=quantity)
    order = _order(demo, SHOES, TEES, HEADPHONES)

    # when: the plan's current choice has no stock row at all
    shoes, tees = plan_product_choices(order, also=["SHOE-TRAIL-45"])

    # then
    assert shoes.label == "Trail running shoes, size 42"
    assert [size.label for size in shoes.sizes] == [
        "size 41 — 2 in stock",
        "size 42 — 5 in stock",
        "size 43 — 7 in stock",
        "size 44 — out of stock",
        "size 45 — out of stock",
    ]
    assert [size.size for size in tees.sizes] == ["S", "L", "XL"]


def test_a_size_of_another_product_or_more_than_the_order_holds_is_refused(demo):
    # given
    factories.stock_create(merchant=demo, sku="TEE-BASIC-L", quantity=5)
    products = plan_product_choices(_order(demo, SHOES, TEES))

    # when
    form = PlanLineForm(
        {"product": "SHOE-TRAIL-42", "size": "SHOE-TRAIL-41", "quantity": 2}, products=products
    )
    mixed = PlanLineForm(
        {"product": "SHOE-TRAIL-42", "size": "TEE-BASIC-L", "quantity": 1}, products=products
    )

    # then
    assert form.errors == {"quantity": ["The order holds only 1."]}
    assert mixed.errors == {"size": ["Pick a size of the Trail running shoes."]}


def test_the_diff_says_what_changed_product_by_product(demo):
    # given: a plan whose version 2 changes the shoes' size and adds the shirts
    ticket = ticket_of(exchange_run(demo))
    ticket.order.items = [SHOES, TEES]
    ticket.order.save()
    Proposal.objects.create(
        ticket=ticket,
        version=2,
        summary="-",
        items=[
            {"sku": "SHOE-TRAIL-42", "new_sku": "SHOE-TRAIL-44", "quantity": 1},
            {"sku": "TEE-BASIC-M", "new_sku": "TEE-BASIC-L", "quantity": 2},
        ],
    )
    Ticket.objects.filter(pk=ticket.pk).update(version=2)
    ticket.refresh_from_db()

    # when
    diff = plan_diff(ticket)

    # then
    assert (diff.from_version, diff.to_version) == (1, 2)
    assert [(c.product, c.before, c.after) for c in diff.changes] == [
        ("Trail running shoes", "size 43", "size 44"),
        ("Basic T-shirt", None, "size L, quantity 2"),
    ]
