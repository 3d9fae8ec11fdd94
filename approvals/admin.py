import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from agentportal.admin import MerchantScopedAdmin, ReadOnlyAdminMixin
from agentportal.problems import Problem
from approvals import services
from approvals.models import Approval, ApprovalStatus, Decision, Order, Refund, StockLevel


@admin.register(Order)
class OrderAdmin(MerchantScopedAdmin):
    list_display = ["number", "merchant", "customer", "status", "total", "refunded"]
    list_filter = ["status"]
    search_fields = ["number", "customer__username"]


@admin.register(StockLevel)
class StockLevelAdmin(MerchantScopedAdmin):
    list_display = ["sku", "merchant", "quantity"]
    search_fields = ["sku"]


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = ["order", "amount", "reason", "idempotency_key", "created_at"]
    search_fields = ["order__number", "idempotency_key"]


class ExpiringSoonFilter(admin.SimpleListFilter):
    title = "expires"
    parameter_name = "expires"

    def lookups(self, request, model_admin):
        return [("15m", "within 15 minutes"), ("1h", "within an hour")]

    def queryset(self, request, queryset):
        minutes = {"15m": 15, "1h": 60}.get(self.value())
        if minutes is None:
            return queryset
        return queryset.filter(
            status=ApprovalStatus.PENDING_APPROVAL,
            expires_at__lte=timezone.now() + timezone.timedelta(minutes=minutes),
        )


class DecisionActionForm(ActionForm):
    reason = forms.CharField(required=False, label="Reason (to reject)", max_length=2000)


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=Decision.choices, widget=forms.RadioSelect)
    tool_args = forms.JSONField(
        required=False,
        label="Arguments (edit to revise)",
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
    )
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = [
        "interrupt_id",
        "status",
        "tool_name",
        "run_link",
        "customer",
        "time_left",
        "decided_by",
        "created_at",
    ]
    list_filter = ["status", ExpiringSoonFilter, "tool_name", "merchant"]
    list_select_related = ["run__account", "decided_by", "merchant"]
    search_fields = ["interrupt_id", "run__account__username"]
    actions = ["approve_selected", "reject_selected"]
    action_form = DecisionActionForm
    readonly_fields = [
        "interrupt_id",
        "run_link",
        "merchant",
        "tool_name",
        "status",
        "proposed",
        "approved",
        "executed",
        "args_digest",
        "decision",
        "reason",
        "decided_by",
        "decided_at",
        "expires_at",
        "result",
        "decide_link",
    ]
    fields = readonly_fields

    def get_list_filter(self, request):
        if request.user.is_superuser:
            return self.list_filter
        return ["status", ExpiringSoonFilter, "tool_name"]

    @admin.display(description="run")
    def run_link(self, approval):
        url = reverse("admin:runs_agentrun_change", args=[approval.run_id])
        return format_html('<a href="{}">{}</a>', url, str(approval.run_id)[:8])

    @admin.display(description="customer")
    def customer(self, approval):
        return approval.run.account.get_username()

    @admin.display(description="time left")
    def time_left(self, approval):
        if approval.status != ApprovalStatus.PENDING_APPROVAL:
            return "-"
        left = approval.expires_at - timezone.now()
        if left.total_seconds() <= 0:
            return "due"
        minutes = int(left.total_seconds() // 60)
        return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h"

    def _json(self, value):
        return format_html("<pre>{}</pre>", json.dumps(value, indent=2)) if value else "-"

    @admin.display(description="proposed arguments")
    def proposed(self, approval):
        return self._json(approval.proposed_args)

    @admin.display(description="approved arguments")
    def approved(self, approval):
        return self._json(approval.approved_args)

    @admin.display(description="executed arguments")
    def executed(self, approval):
        return self._json(approval.executed_args)

    @admin.display(description="decide")
    def decide_link(self, approval):
        if approval.status != ApprovalStatus.PENDING_APPROVAL:
            return "-"
        url = reverse("admin:approvals_approval_decide", args=[approval.pk])
        return format_html('<a class="button" href="{}">Approve, revise or reject</a>', url)

    def get_urls(self):
        return [
            path(
                "<int:approval_id>/decide/",
                self.admin_site.admin_view(self.decide_view),
                name="approvals_approval_decide",
            ),
            *super().get_urls(),
        ]

    def decide_view(self, request, approval_id):
        approval = get_object_or_404(self.get_queryset(request), pk=approval_id)
        form = DecideForm(request.POST or None, initial={"tool_args": approval.proposed_args})
        if request.method == "POST" and form.is_valid():
            decision = form.cleaned_data["decision"]
            try:
                services.approval_decide_as_user(
                    approval=approval,
                    user=request.user,
                    decision=decision,
                    tool_args=form.cleaned_data["tool_args"]
                    if decision == Decision.REVISE
                    else None,
                    reason=form.cleaned_data["reason"],
                )
            except Problem as problem:
                for error in problem.errors or []:
                    form.add_error(None, f"{error['field']}: {error['message']}")
                form.add_error(None, problem.detail)
            else:
                self.message_user(
                    request, f"Approval {approval.interrupt_id}: {decision} recorded."
                )
                return redirect("admin:approvals_approval_change", approval.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Decide {approval.tool_name} ({approval.interrupt_id})",
            "approval": approval,
            "form": form,
            "opts": self.model._meta,
            "proposed": json.dumps(approval.proposed_args, indent=2),
        }
        return TemplateResponse(request, "admin/approvals/approval/decide.html", context)

    def _decide_selected(self, request, queryset, decision: str, done: str):
        reason = request.POST.get("reason", "")
        for approval in queryset.select_related("run", "merchant"):
            try:
                services.approval_decide_as_user(
                    approval=approval, user=request.user, decision=decision, reason=reason
                )
            except Problem as problem:
                who = problem.extensions.get("decided_by")
                detail = f"already decided by {who}" if who else problem.detail
                self.message_user(
                    request, f"Approval {approval.interrupt_id}: {detail}", messages.WARNING
                )
            else:
                self.message_user(request, f"Approval {approval.interrupt_id}: {done}.")

    @admin.action(description="Approve the selected calls")
    def approve_selected(self, request, queryset):
        self._decide_selected(request, queryset, Decision.APPROVE, "approved")

    @admin.action(description="Reject the selected calls (with the reason above)")
    def reject_selected(self, request, queryset):
        self._decide_selected(request, queryset, Decision.REJECT, "rejected")
