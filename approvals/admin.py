import json
from datetime import UTC

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agentportal import errors
from agentportal.admin import MerchantScopedAdmin, ReadOnlyAdminMixin
from agentportal.errors import DomainError
from agentportal.selectors import principal_for_user
from approvals.audit.admin import DecisionRecordAdmin
from approvals.gate import assignment, services
from approvals.gate.policy_admin import ApprovalPolicyAdmin
from approvals.gate.team_admin import AbsenceAdmin, ApproverGroupAdmin
from approvals.models import (
    Absence,
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApproverGroup,
    Decision,
    DecisionRecord,
    FollowupRequest,
    Order,
    Refund,
    StockLevel,
    Ticket,
)
from approvals.plans.admin import TicketAdmin
from approvals.portal.approval_views import changed_meanwhile_said

admin.site.register(ApprovalPolicy, ApprovalPolicyAdmin)
admin.site.register(Ticket, TicketAdmin)
admin.site.register(Absence, AbsenceAdmin)
admin.site.register(ApproverGroup, ApproverGroupAdmin)
admin.site.register(DecisionRecord, DecisionRecordAdmin)


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
    assignee = forms.CharField(
        required=False, label="Supervisor or group (to assign; blank unassigns)", max_length=150
    )


class DecideForm(forms.Form):
    decision = forms.ChoiceField(choices=Decision.choices, widget=forms.RadioSelect)
    tool_args = forms.JSONField(
        required=False,
        label="Arguments (edit to revise)",
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
    )
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    # The digest of the arguments this page showed: the decision counts for those only.
    args_digest = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, approve: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not approve:
            # Arguments changed under the page: approving waits for a reload.
            self.fields["decision"].choices = [
                choice for choice in Decision.choices if choice[0] != Decision.APPROVE
            ]


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = [
        "interrupt_id",
        "status",
        "tool_name",
        "run_link",
        "customer",
        "time_left",
        "assigned",
        "decided_by",
        "created_at",
    ]
    list_filter = ["status", ExpiringSoonFilter, "tool_name", "merchant"]
    list_select_related = [
        "run__account",
        "decided_by",
        "merchant",
        "assigned_user",
        "assigned_group",
    ]
    search_fields = ["interrupt_id", "run__account__username"]
    # No bulk approve: an approval pays what its page showed, one call at a time.
    actions = ["reject_selected", "assign_selected"]
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
        "decided_by_whom",
        "decided_at",
        "required_approvals",
        "required_group",
        "approvals_given",
        "policy",
        "escalate_at",
        "escalated_at",
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

    @admin.display(description="decided by")
    def decided_by_whom(self, approval):
        return approval.decided_by_name or "-"

    @admin.display(description="approvals given")
    def approvals_given(self, approval):
        """Every approval given, oldest first; those of arguments a revision replaced no longer
        count and say so."""
        votes = list(approval.votes.select_related("user", "approval__merchant"))
        if not votes:
            return "-"
        counting = {vote.pk for vote in approval.current_votes}
        return format_html(
            "<table><thead><tr><th>by</th><th>decision</th><th>at (UTC)</th><th></th></tr>"
            "</thead><tbody>{}</tbody></table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (
                        vote.voter_name,
                        vote.decision,
                        vote.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                        "" if vote.pk in counting else "for arguments since revised",
                    )
                    for vote in votes
                ),
            ),
        )

    @admin.display(description="policy")
    def policy(self, approval):
        version = approval.policy_version
        if version is None:
            return "-"
        said = f"{approval.tool_name} policy, version {version.version} ({version.label})"
        return f"{said}: approved by it" if approval.decided_by_policy else said

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
        form = DecideForm(request.POST or None, initial=self._on_the_table(approval))
        if request.method == "POST" and form.is_valid():
            decision = form.cleaned_data["decision"]
            try:
                if decision == Decision.APPROVE and self._edited(approval, form.cleaned_data):
                    raise errors.InvalidInput(
                        "You changed the arguments: pick Revise to approve your changes, or "
                        "reload to approve as proposed."
                    )
                services.approval_decide_as_user(
                    approval=approval,
                    user=request.user,
                    decision=decision,
                    tool_args=form.cleaned_data["tool_args"]
                    if decision == Decision.REVISE
                    else None,
                    reason=form.cleaned_data["reason"],
                    args_digest=form.cleaned_data["args_digest"] or None,
                    via="admin",
                )
            except errors.ArgumentsChanged:
                approval.refresh_from_db()
                self.message_user(request, changed_meanwhile_said(approval), messages.WARNING)
                form = DecideForm(initial=self._on_the_table(approval), approve=False)
            except DomainError as refusal:
                for error in refusal.errors or []:
                    form.add_error(None, f"{error['field']}: {error['message']}")
                form.add_error(None, refusal.detail)
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
            "proposed": json.dumps(approval.arguments_on_the_table, indent=2),
        }
        return TemplateResponse(request, "admin/approvals/approval/decide.html", context)

    @staticmethod
    def _on_the_table(approval: Approval) -> dict:
        return {
            "tool_args": approval.arguments_on_the_table,
            "args_digest": approval.digest_on_the_table,
        }

    @staticmethod
    def _edited(approval: Approval, data: dict) -> bool:
        """An approve sent with other arguments than those on the table it saw: the edit is
        neither approved unseen nor dropped."""
        seen = data["args_digest"] in ("", approval.digest_on_the_table)
        return seen and data["tool_args"] not in (None, approval.arguments_on_the_table)

    @admin.action(description="Reject the selected calls (with the reason above)")
    def reject_selected(self, request, queryset):
        reason = request.POST.get("reason", "")
        for approval in queryset.select_related("run", "merchant"):
            try:
                services.approval_decide_as_user(
                    approval=approval,
                    user=request.user,
                    decision=Decision.REJECT,
                    reason=reason,
                    via="admin",
                )
            except DomainError as refusal:
                who = refusal.context.get("decided_by")
                detail = f"already decided by {who}" if who else refusal.detail
                self.message_user(
                    request, f"Approval {approval.interrupt_id}: {detail}", messages.WARNING
                )
            else:
                self.message_user(request, f"Approval {approval.interrupt_id}: rejected.")

    @admin.display(description="Assigned to")
    def assigned(self, approval: Approval) -> str:
        return approval.assigned_name or None

    @admin.action(description="Assign the selected calls (to the supervisor or group above)")
    def assign_selected(self, request, queryset):
        name = request.POST.get("assignee", "")
        for approval in queryset.select_related("run", "merchant"):
            principal = principal_for_user(user=request.user, merchant=approval.merchant)
            try:
                if principal is None:
                    raise errors.NotAllowed("You do not supervise this call's shop.")
                assignment.approval_assign(
                    approval=approval,
                    principal=principal,
                    assignee=assignment.assignee_named(merchant=approval.merchant, name=name),
                )
            except DomainError as refusal:
                self.message_user(
                    request, f"Approval {approval.interrupt_id}: {refusal.detail}", messages.WARNING
                )
            else:
                to = name.strip() or "nobody"
                self.message_user(request, f"Approval {approval.interrupt_id}: assigned to {to}.")


@admin.register(FollowupRequest)
class FollowupRequestAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = ["order", "due_at", "note", "created_at"]
    list_select_related = ["order"]
    search_fields = ["order__number"]
