"""The supervisors' dashboard (/portal/insights/): a shop's calls, decisions, refunds and
escalations over the last 7, 30 or 90 days, as charts drawn on the server with their figures
(approvals.portal.insights reads them, approvals.portal.charts draws them)."""

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.template.defaultfilters import pluralize
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from agentportal.selectors import merchants_supervised_by
from approvals.gate.decision_context import money
from approvals.portal import charts
from approvals.portal.insights import MAX_TIMED, OUTCOMES, PERIODS, QUICK_APPROVAL, shop_insights


class InsightsForm(forms.Form):
    shop = forms.ModelChoiceField(queryset=None, empty_label=None, to_field_name="slug")
    days = forms.TypedChoiceField(
        label="Period",
        coerce=int,
        choices=[(days, f"Last {days} days") for days in PERIODS],
        initial=30,
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["shop"].queryset = merchants_supervised_by(user=user).order_by("name")


@never_cache
@login_required
@require_GET
def insights_page(request):
    shops = list(merchants_supervised_by(user=request.user).order_by("name"))
    if not shops:
        raise Http404("Only a shop's supervisors and operators see its dashboard.")
    # What was asked for, or where it cannot be had (a shop not theirs, a period not offered)
    # the first shop and the last 30 days, with the form saying why.
    form = InsightsForm(
        {"shop": shops[0].slug, "days": 30, **request.GET.dict()}, user=request.user
    )
    form.is_valid()
    shop = form.cleaned_data.get("shop", shops[0])
    days = form.cleaned_data.get("days", 30)
    insights = shop_insights(merchant=shop, days=days)
    return render(
        request,
        "portal/insights.html",
        {
            "form": form,
            "shop": shop,
            "days": days,
            "many_shops": len(shops) > 1,
            "insights": insights,
            "charts": _charts(insights),
            "weeks": [
                (
                    week.week,
                    week.decided,
                    charts.duration_label(week.decide_p50),
                    charts.duration_label(week.decide_p95),
                    charts.duration_label(week.first_view_p50)
                    if week.first_view_p50 is not None
                    else "",
                )
                for week in insights.weeks
            ],
            "quick_seconds": int(QUICK_APPROVAL.total_seconds()),
            "timed_most": f"{MAX_TIMED:,}",
        },
    )


def _charts(insights) -> list[charts.Chart]:
    days = [charts.day_label(day) for day in insights.days]
    scale, per = charts.duration_scale(max((week.decide_p95 for week in insights.weeks), default=0))
    drawn = [
        charts.stacked_bars(
            slug="calls",
            title="Calls a day, by how they ended",
            summary=(
                f"{insights.calls} call{pluralize(insights.calls)} asked for, "
                + ", ".join(
                    f"{insights.totals[key]} {name.lower()}"
                    for key, name in OUTCOMES.items()
                    if insights.totals[key]
                )
                + "."
            ),
            columns=days,
            series=[(name, insights.outcomes[key]) for key, name in OUTCOMES.items()],
            counts=True,
        ),
        charts.lines(
            slug="time-to-decide",
            title=f"Time for people to decide, by week ({scale})",
            summary=(
                "From the call to its decision: half of the decisions took less than the median, "
                "19 in 20 less than the 95th percentile."
            ),
            columns=[f"Week of {charts.day_label(week.week)}" for week in insights.weeks],
            series=[
                ("Median", [week.decide_p50 / per for week in insights.weeks]),
                ("95th percentile", [week.decide_p95 / per for week in insights.weeks]),
            ],
            unit=lambda value: charts.duration_label(value * per),
        ),
    ]
    for currency, amounts in insights.refunded.items():
        drawn.append(
            charts.stacked_bars(
                slug=f"refunded-{currency.lower()}",
                title=f"Money refunded a day ({currency})",
                summary=f"{money(sum(amounts), currency)} refunded in the period.",
                columns=days,
                series=[("Refunded", amounts)],
                unit=lambda value, currency=currency: money(value, currency),
            )
        )
    escalated = sum(insights.escalations)
    drawn.append(
        charts.stacked_bars(
            slug="escalations",
            title="Escalations a day",
            summary=f"{escalated} call{pluralize(escalated)} waited past their policy's time.",
            columns=days,
            series=[("Escalated", insights.escalations)],
            counts=True,
        )
    )
    return drawn
