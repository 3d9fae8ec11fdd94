"""The supervisor's "Away" page: set an absence from a shop with a colleague standing in,
see their absences and those they stand in for, and end one (approvals.gate.delegation)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from agentportal.errors import DomainError
from agentportal.selectors import merchants_supervised_by, supervisor_memberships
from approvals.gate import delegation
from approvals.models import Absence


class AbsenceForm(forms.Form):
    shop = forms.ModelChoiceField(queryset=None, empty_label=None)
    delegate = forms.ModelChoiceField(
        queryset=None, label="Who stands in for you", empty_label="Choose a colleague"
    )
    starts_at = forms.DateTimeField(
        label="Away from (UTC; empty: now)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    ends_at = forms.DateTimeField(
        label="Back on (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        shops = merchants_supervised_by(user=user).order_by("name")
        self.fields["shop"].queryset = shops
        colleagues = User.objects.filter(
            pk__in=[
                membership.user_id
                for shop in shops
                for membership in supervisor_memberships(merchant=shop)
            ]
        ).exclude(pk=user.pk)
        self.fields["delegate"].queryset = colleagues.order_by("username")
        if len(shops) == 1:
            self.fields["shop"].widget = forms.HiddenInput()
            self.fields["shop"].initial = shops[0]


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def away_page(request):
    if not merchants_supervised_by(user=request.user).exists():
        raise Http404("Only supervisors are away from a shop.")
    form = AbsenceForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            absence = delegation.absence_set(
                merchant=data["shop"],
                user=request.user,
                delegate=data["delegate"],
                starts_at=data["starts_at"] or timezone.now(),
                ends_at=data["ends_at"],
            )
        except DomainError as refusal:
            for error in refusal.errors or [{"field": None, "message": refusal.detail}]:
                form.add_error(
                    error["field"] if error["field"] in form.fields else None, error["message"]
                )
        else:
            messages.success(
                request,
                f"Until {absence.ends_at:%Y-%m-%d %H:%M} UTC, {absence.delegate.get_username()} "
                "gets the calls assigned to you and your emails about calls.",
            )
            return redirect("portal-away")
    now = timezone.now()
    current = Absence.objects.select_related("merchant", "user", "delegate").filter(ends_at__gt=now)
    return render(
        request,
        "portal/away.html",
        {
            "form": form,
            "mine": current.filter(user=request.user).order_by("starts_at"),
            "standing_in": current.filter(delegate=request.user).order_by("starts_at"),
            "now": now,
        },
    )


@login_required
@require_POST
def away_end(request, absence_id: int):
    absence = Absence.objects.filter(pk=absence_id, user=request.user).first()
    if absence is None:
        raise Http404("No such absence of yours.")
    delegation.absence_end(absence=absence)
    messages.success(request, "Welcome back: calls and emails come to you again.")
    return redirect("portal-away")
