"""The supervisor's "Away" page: an absence set with a stand-in, said back, and ended."""

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import Absence
from tests.pages import page_text, signed_in


@pytest.mark.django_db
def test_sam_sets_his_absence_sue_sees_she_stands_in_and_sam_comes_back(demo):
    # given
    sam, sue = signed_in("sam"), signed_in("sue")
    sue_id = User.objects.get(username="sue").pk
    until = (timezone.now() + timezone.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")

    # when sam names sue until the day after tomorrow
    set_page = sam.post(
        "/portal/away/",
        {"shop": demo.pk, "delegate": sue_id, "ends_at": until},
        follow=True,
    )

    # then he is told, and sue's page says she stands in for him
    said = page_text(set_page)
    assert "sue gets the calls assigned to you" in said
    assert 'id="my-absences"' in said and "I'm back" in said
    assert "sam in Demo Shop, until" in page_text(sue.get("/portal/away/"))

    # when he is back
    absence = Absence.objects.get()
    back = sam.post(f"/portal/away/{absence.pk}/end/", follow=True)

    # then
    assert "Welcome back" in page_text(back)
    assert "You are not away." in page_text(back)
    absence.refresh_from_db()
    assert absence.ends_at <= timezone.now()


@pytest.mark.django_db
def test_a_bad_absence_says_what_is_wrong_in_the_form(demo):
    sam = signed_in("sam")
    past = (timezone.now() - timezone.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    sue_id = User.objects.get(username="sue").pk

    no_date = sam.post("/portal/away/", {"shop": demo.pk, "delegate": sue_id})
    over = sam.post("/portal/away/", {"shop": demo.pk, "delegate": sue_id, "ends_at": past})

    assert no_date.status_code == over.status_code == 200
    assert "This field is required." in page_text(no_date)
    assert "That absence is over already." in page_text(over)
    assert not Absence.objects.exists()


@pytest.mark.django_db
def test_customers_have_no_away_page_nor_end_others_absences(demo):
    assert signed_in("alice").get("/portal/away/").status_code == 404
    sam = signed_in("sam")
    sue_id = User.objects.get(username="sue").pk
    until = (timezone.now() + timezone.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    sam.post("/portal/away/", {"shop": demo.pk, "delegate": sue_id, "ends_at": until})
    absence = Absence.objects.get()

    assert signed_in("sue").post(f"/portal/away/{absence.pk}/end/").status_code == 404
    absence.refresh_from_db()
    assert absence.ends_at > timezone.now()
