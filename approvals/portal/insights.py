"""What a shop's people did with its gated calls over a period, as the dashboard shows it
(/portal/insights/): the calls of each day by how they ended, how long people took to decide
each week (p50, p95), each supervisor's approvals, revisions and rejections with how many of
the approvals came within seconds of the call's first view, the money refunded each day and the
escalations. A read: nothing is changed, and each figure is one grouped query."""

import math
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import (
    Count,
    DateField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Sum,
)
from django.db.models.functions import TruncDate, TruncWeek
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, ApprovalVote, Decision, Refund

# The periods the dashboard offers, in days back from today (today included).
PERIODS = (7, 30, 90)
# An approval given this soon after anyone first opened the call: a rubber stamp, maybe.
QUICK_APPROVAL = timedelta(seconds=5)
# Most decisions timed for the quantiles: the newest of the period, a bounded read.
MAX_TIMED = 50_000

CENT = Decimal("0.01")

# How a call ended, in the order the chart stacks them.
OUTCOMES = {
    "policy": "Approved by the policy",
    "approved": "Approved by people",
    "revised": "Revised by people",
    "rejected": "Rejected",
    "refused": "Refused by the tool",
    "lapsed": "Expired or cancelled",
    "waiting": "Waiting",
}


@dataclass
class DecideTimes:
    """One week's decisions by people: how many, and the seconds from the call to its decision
    (and to its first view) at the median and the 95th percentile (nearest rank)."""

    week: date
    decided: int
    decide_p50: float | None
    decide_p95: float | None
    first_view_p50: float | None


@dataclass
class SupervisorRates:
    username: str
    approved: int = 0
    revised: int = 0
    rejected: int = 0
    quick_approvals: int = 0

    @property
    def decisions(self) -> int:
        return self.approved + self.revised + self.rejected

    def _share(self, count: int) -> int:
        """`count` as a whole percentage of this person's decisions."""
        return round(100 * count / self.decisions) if self.decisions else 0

    @property
    def approved_share(self) -> int:
        return self._share(self.approved)

    @property
    def revised_share(self) -> int:
        return self._share(self.revised)

    @property
    def rejected_share(self) -> int:
        return self._share(self.rejected)

    @property
    def quick_share(self) -> int:
        return round(100 * self.quick_approvals / self.approved) if self.approved else 0


@dataclass
class ShopInsights:
    since: date
    until: date
    days: list[date]
    # outcome -> calls asked for on each day of `days`
    outcomes: dict[str, list[int]]
    weeks: list[DecideTimes]
    supervisors: list[SupervisorRates]
    # currency -> money refunded on each day of `days`
    refunded: dict[str, list[Decimal]]
    escalations: list[int]
    truncated: bool = False
    totals: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.totals = {outcome: sum(counts) for outcome, counts in self.outcomes.items()}

    @property
    def calls(self) -> int:
        return sum(self.totals.values())


def quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank quantile of `values` (sorted): the smallest value with at least `q`
    of them at or below it."""
    if not values:
        return None
    return values[max(math.ceil(q * len(values)), 1) - 1]


def shop_insights(*, merchant, days: int, now: datetime | None = None) -> ShopInsights:
    """The shop's figures for the `days` days up to today (UTC), today included."""
    today = timezone.localdate(now or timezone.now())
    since = today - timedelta(days=days - 1)
    start = datetime.combine(since, time.min, tzinfo=timezone.get_current_timezone())
    end = datetime.combine(today + timedelta(days=1), time.min, tzinfo=start.tzinfo)
    calls = Approval.objects.filter(merchant=merchant)
    period = [since + timedelta(days=n) for n in range(days)]
    weeks, truncated = _decide_times(calls.filter(decided_at__gte=start, decided_at__lt=end))
    return ShopInsights(
        since=since,
        until=today,
        days=period,
        outcomes=_outcomes(calls.filter(created_at__gte=start, created_at__lt=end), period),
        weeks=weeks,
        supervisors=_supervisors(merchant, start, end),
        refunded=_refunded(merchant, start, end, period),
        escalations=_per_day(
            calls.filter(escalated_at__gte=start, escalated_at__lt=end)
            .values(day=TruncDate("escalated_at"))
            .annotate(n=Count("pk")),
            period,
            int,
        ),
        truncated=truncated,
    )


def _per_day(rows, period: list[date], zero, value="n") -> list:
    by_day = {row["day"]: row[value] for row in rows}
    return [by_day.get(day, zero()) for day in period]


def _outcome(status: str, by_policy: bool, revised: bool) -> str:
    if status == ApprovalStatus.PENDING_APPROVAL:
        return "waiting"
    if status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED):
        return "lapsed"
    if status == ApprovalStatus.REJECTED:
        return "rejected"
    if status == ApprovalStatus.FAILED:
        return "refused"
    if by_policy:
        return "policy"
    return "revised" if revised else "approved"


def _outcomes(calls, period: list[date]) -> dict[str, list[int]]:
    revised = ApprovalVote.objects.filter(approval=OuterRef("pk"), decision=Decision.REVISE)
    rows = (
        calls.annotate(day=TruncDate("created_at"), revised=Exists(revised))
        .values("day", "status", "decided_by_policy", "revised")
        .annotate(n=Count("pk"))
    )
    index = {day: n for n, day in enumerate(period)}
    counts = {outcome: [0] * len(period) for outcome in OUTCOMES}
    for row in rows:
        outcome = _outcome(row["status"], row["decided_by_policy"], row["revised"])
        counts[outcome][index[row["day"]]] += row["n"]
    return counts


def _decide_times(decided) -> tuple[list[DecideTimes], bool]:
    # The week and the durations come from the database: reading three datetimes a row costs
    # five times as much as one date and two durations.
    rows = list(
        decided.filter(decided_by_policy=False, decision__in=list(Decision))
        .annotate(
            week=TruncWeek("decided_at", output_field=DateField()),
            to_decide=ExpressionWrapper(F("decided_at") - F("created_at"), DurationField()),
            to_view=ExpressionWrapper(F("first_seen_at") - F("created_at"), DurationField()),
        )
        .order_by("-decided_at")
        .values_list("week", "to_decide", "to_view")[: MAX_TIMED + 1]
    )
    truncated = len(rows) > MAX_TIMED
    by_week: dict[date, tuple[list[float], list[float]]] = {}
    for week, to_decide, to_view in rows[:MAX_TIMED]:
        decide, view = by_week.setdefault(week, ([], []))
        decide.append(to_decide.total_seconds())
        if to_view is not None:
            view.append(to_view.total_seconds())
    weeks = []
    for week in sorted(by_week):
        decide, view = (sorted(values) for values in by_week[week])
        weeks.append(
            DecideTimes(
                week=week,
                decided=len(decide),
                decide_p50=quantile(decide, 0.5),
                decide_p95=quantile(decide, 0.95),
                first_view_p50=quantile(view, 0.5),
            )
        )
    return weeks, truncated


def _supervisors(merchant, start: datetime, end: datetime) -> list[SupervisorRates]:
    quick = Q(
        decision=Decision.APPROVE,
        created_at__lte=F("approval__first_seen_at") + QUICK_APPROVAL,
    )
    votes = (
        ApprovalVote.objects.filter(
            approval__merchant=merchant,
            user__isnull=False,
            created_at__gte=start,
            created_at__lt=end,
        )
        .values("user__username")
        .annotate(
            approved=Count("pk", filter=Q(decision=Decision.APPROVE)),
            revised=Count("pk", filter=Q(decision=Decision.REVISE)),
            quick=Count("pk", filter=quick),
        )
    )
    people: dict[str, SupervisorRates] = {}
    for row in votes:
        person = people.setdefault(row["user__username"], SupervisorRates(row["user__username"]))
        person.approved, person.revised = row["approved"], row["revised"]
        person.quick_approvals = row["quick"]
    rejections = (
        Approval.objects.filter(
            merchant=merchant,
            decision=Decision.REJECT,
            decided_by__isnull=False,
            decided_at__gte=start,
            decided_at__lt=end,
        )
        .values("decided_by__username")
        .annotate(n=Count("pk"))
    )
    for row in rejections:
        name = row["decided_by__username"]
        people.setdefault(name, SupervisorRates(name)).rejected = row["n"]
    return sorted(people.values(), key=lambda person: (-person.decisions, person.username))


def _refunded(merchant, start: datetime, end: datetime, period: list[date]):
    rows = (
        Refund.objects.filter(merchant=merchant, created_at__gte=start, created_at__lt=end)
        .values(day=TruncDate("created_at"), currency=F("order__currency"))
        .annotate(total=Sum("amount"))
    )
    by_currency: dict[str, list[dict]] = {}
    for row in rows:
        # SQLite sums decimals without their scale: 5.00 + 0 comes back as 5.
        row["total"] = Decimal(row["total"]).quantize(CENT)
        by_currency.setdefault(row["currency"], []).append(row)
    return {
        currency: _per_day(found, period, lambda: CENT * 0, "total")
        for currency, found in sorted(by_currency.items())
    }
