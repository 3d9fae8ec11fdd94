"""A supervisor looks at how the shop is doing, on a phone: the dashboard's charts fit its
width, read without a script, and open their figures."""

import pytest
from django.utils import timezone

from tests.approvals.portal.insight_helpers import seeded_history
from tests.browser.accessibility import serious_violations
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def test_sam_reads_the_shops_insights_on_his_phone(demo, api, signed_in, live_server):
    # given three days of calls, decisions and refunds up to today
    seeded_history(demo, api, now=timezone.now())
    sam = signed_in("sam")
    sam.set_viewport_size(PHONE)
    sam.goto(f"{live_server.url}/portal/")

    # when he follows the inbox's link to the insights
    sam.click("#insights-link")
    sam.wait_for_selector("#calls-chart rect")
    screenshot(sam, "insights-phone")

    # then every chart is drawn within the phone's width, and nothing serious for axe
    assert sam.title() == "Insights for Demo Shop · Agent Portal"
    for chart in ("calls", "time-to-decide", "refunded-eur", "escalations"):
        assert sam.locator(f"#{chart}-chart").bounding_box()["width"] <= PHONE["width"]
    assert sam.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert serious_violations(sam) == []
    # and the rubber-stamp signal is there: sam's one approval came 2 s after its first view
    assert "1 (100% of approvals)" in sam.inner_text("#supervisors")

    # when he opens the refunds' figures
    sam.click("#refunded-eur-heading ~ details summary")

    # then the three days' refunds are listed
    rows = sam.inner_text("#refunded-eur-heading ~ details tbody").splitlines()
    paid = [row.split("\t")[-1] for row in rows if not row.endswith("\t0.00 EUR")]
    assert paid == ["5.00 EUR", "4.00 EUR", "3.00 EUR"]
    screenshot(sam, "insights-figures-phone")

    # when he picks the last 7 days and asks for them
    sam.select_option("#id_days", "7")
    sam.click("#insights-form button")
    sam.wait_for_url("**/portal/insights/?**days=7**")

    # then the page says which days it shows
    assert "7 days" in sam.locator("option:checked").inner_text()
    sam.set_viewport_size({"width": 1280, "height": 900})
    screenshot(sam, "insights-desktop")
