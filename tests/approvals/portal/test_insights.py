"""The supervisors' dashboard: each figure checked by hand against a seeded history, who may
see it, and what a bad choice of shop or period gets."""

import re
from datetime import date

import pytest
import time_machine

from agentportal.models import Role
from approvals.models import Refund
from approvals.portal.insights import shop_insights
from tests import factories
from tests.approvals.portal.insight_helpers import NOW, seeded_history
from tests.pages import signed_in


def page_text(response) -> str:
    """What the page says: its HTML without tags, white space folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


@pytest.mark.django_db
def test_each_figure_of_a_seeded_history(demo, api):
    # given three days of calls, decisions and refunds
    seeded_history(demo, api)
    assert Refund.objects.count() == 3

    # when the dashboard reads the last seven days at noon on Monday
    insights = shop_insights(merchant=demo, days=7, now=NOW)

    # then, day by day (Tuesday 1 to Monday 7; the calls on the 5th, 6th and 7th)
    assert insights.days[0] == date(2026, 12, 1) and insights.days[-1] == date(2026, 12, 7)
    zeros = [0, 0, 0, 0]
    assert insights.outcomes == {
        "policy": [*zeros, 0, 0, 1],
        "approved": [*zeros, 1, 0, 0],
        "revised": [*zeros, 0, 1, 0],
        "rejected": [*zeros, 1, 0, 0],
        "refused": [*zeros, 0, 0, 0],
        "lapsed": [*zeros, 0, 0, 0],
        "waiting": [*zeros, 0, 1, 0],
    }
    assert insights.calls == 5
    # three decisions by people, all in the week of Monday 30 November: 4, 120 and 600 s to
    # decide (median the second, p95 the third), first views after 2, 30 and 60 s
    [week] = insights.weeks
    assert (week.week, week.decided) == (date(2026, 11, 30), 3)
    assert (week.decide_p50, week.decide_p95, week.first_view_p50) == (120, 600, 30)
    # sam approved one (2 s after its first view: quick) and revised one; sue rejected one
    rates = {
        person.username: (person.approved, person.revised, person.rejected, person.quick_approvals)
        for person in insights.supervisors
    }
    assert rates == {"sam": (1, 1, 0, 1), "sue": (0, 0, 1, 0)}
    assert [person.username for person in insights.supervisors] == ["sam", "sue"]
    assert insights.supervisors[0].approved_share == 50
    money = ["0.00"] * 4
    assert {
        currency: [str(amount) for amount in amounts]
        for currency, amounts in insights.refunded.items()
    } == {"EUR": [*money, "5.00", "4.00", "3.00"]}
    assert insights.escalations == [*zeros, 0, 0, 1]


@pytest.mark.django_db
def test_a_period_before_the_calls_shows_none(demo, api):
    seeded_history(demo, api)

    insights = shop_insights(merchant=demo, days=7, now=NOW.replace(month=11, day=20))

    assert insights.calls == 0
    assert (insights.weeks, insights.supervisors, insights.refunded) == ([], [], {})
    assert insights.escalations == [0] * 7


@pytest.mark.django_db
def test_sam_sees_the_charts_their_figures_and_the_supervisors(demo, api):
    # given
    seeded_history(demo, api)

    # when sam opens the dashboard on Monday afternoon
    with time_machine.travel(NOW, tick=False):
        response = signed_in("sam").get("/portal/insights/?days=7")

    # then each chart is drawn with its figures, and each supervisor has a row
    assert response.status_code == 200
    page = response.content.decode()
    for chart in ("calls", "time-to-decide", "refunded-eur", "escalations"):
        assert re.search(f'<svg viewBox="0 0 480 220" role="img" [^>]*id="{chart}-chart"', page)
    text = page_text(response)
    assert "Insights for Demo Shop" in text
    assert "5 calls asked for, 1 approved by the policy, 1 approved by people" in text
    assert "12.00 EUR refunded in the period." in text
    assert "sam 2 1 (50%) 1 (50%) 0 (0%) 1 (100% of approvals)" in text
    assert "sue 1 0 (0%) 0 (0%) 1 (100%) 0 (0% of approvals)" in text
    assert "Nov 30 3 2 min 10 min 30 s" in text


@pytest.mark.django_db
def test_customers_and_people_of_other_shops_do_not_see_the_shop(demo):
    # given a supervisor of another shop only
    other = factories.merchant_create("elsewhere")
    factories.user_create("otto", merchant=other, role=Role.SUPERVISOR)

    # then the customer gets nothing, and otto sees his own shop, not the one he asks for
    assert signed_in("alice").get("/portal/insights/").status_code == 404
    response = signed_in("otto").get("/portal/insights/?shop=demo-shop")
    assert response.status_code == 200
    text = page_text(response)
    assert "Insights for Elsewhere" in text
    assert "Shop: Select a valid choice. That choice is not one of the available choices." in text
    assert "Shown instead: Elsewhere, the last 30 days." in text
    assert "Demo Shop" not in text


@pytest.mark.django_db
def test_a_period_not_offered_is_a_form_error_and_the_last_30_days_are_shown(demo):
    response = signed_in("sam").get("/portal/insights/?days=5")

    assert response.status_code == 200
    text = page_text(response)
    assert "Period: Select a valid choice. 5 is not one of the available choices." in text
    assert "Shown instead: Demo Shop, the last 30 days." in text
    assert "0 calls asked for." in text
    assert "Nothing to draw in this period." in text
