"""A supervisor names who stands in for them while away, from a phone."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Absence
from tests.browser.conftest import screenshot

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}


def test_sam_names_sue_to_stand_in_until_he_is_back(demo, signed_in, live_server):
    # given sam's inbox on a phone
    sam = signed_in("sam")
    sam.set_viewport_size(PHONE)
    sam.goto(f"{live_server.url}/portal/")

    # when he follows the inbox's link, picks sue and a day, and presses Enter
    sam.click("#away-link")
    sam.select_option("#id_delegate", label="sue")
    back_on = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    sam.fill("#id_ends_at", back_on)
    screenshot(sam, "away-form-phone")
    sam.press("#id_ends_at", "Enter")
    sam.wait_for_selector("table#my-absences")
    screenshot(sam, "away-set-phone")

    # then the page says so and the absence is written
    assert "sue gets the calls assigned to you" in sam.inner_text("body")
    absence = Absence.objects.get()
    assert (absence.user.username, absence.delegate.username) == ("sam", "sue")
    assert sam.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
