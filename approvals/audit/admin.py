"""The decision record in the admin, for a shop's operators: read, never written here, and
downloaded as CSV (the whole record, or the days the list is filtered to), streamed."""

from datetime import UTC, datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.dateparse import parse_date

from agentportal.admin import OperatorScopedAdmin, ReadOnlyAdminMixin
from agentportal.models import Merchant
from approvals.audit.export import csv_lines, records_of


class DecisionRecordAdmin(ReadOnlyAdminMixin, OperatorScopedAdmin):
    list_display = ["seq", "at", "kind", "tool_name", "interrupt_id", "actor", "via", "merchant"]
    list_filter = ["kind", "merchant"]
    search_fields = ["interrupt_id", "actor"]
    date_hierarchy = "at"
    ordering = ["-id"]
    change_list_template = "admin/approvals/decisionrecord/change_list.html"

    def get_urls(self):
        return [
            path(
                "csv/",
                self.admin_site.admin_view(self.csv_view),
                name="approvals_decisionrecord_csv",
            ),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "csv_shops": self._shops(request)}
        return super().changelist_view(request, extra_context)

    def _shops(self, request):
        if request.user.is_superuser:
            return Merchant.objects.order_by("slug")
        return self.shops_of(request.user).order_by("slug")

    def csv_view(self, request):
        """?shop=<slug>[&since=YYYY-MM-DD][&until=YYYY-MM-DD]: that shop's record as CSV."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        shop = self._shops(request).filter(slug=request.GET.get("shop", "")).first()
        since, until = (_day(request.GET.get(name)) for name in ("since", "until"))
        if shop is None or since is False or until is False:
            messages.error(request, "Name one of your shops, and days as YYYY-MM-DD.")
            return redirect(reverse("admin:approvals_decisionrecord_changelist"))
        entries = records_of(merchant_id=shop.pk, since=since, until=until)
        response = StreamingHttpResponse(csv_lines(entries), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="record-{shop.slug}.csv"'
        return response


def _day(text: str | None) -> datetime | bool | None:
    """A day's start (UTC), None when not given, False when it does not read."""
    if not text:
        return None
    day = parse_date(text) if len(text) == 10 else None
    if day is None:
        return False
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
