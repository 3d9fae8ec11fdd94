"""The admin of exchange plans: a ticket with its proposals, confirmations, reviews and
business events; supervisors revise, approve or reject a plan through the ticket commands."""

from django import forms
from django.contrib import admin
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agentportal.admin import HistoryInline, MerchantScopedAdmin, ReadOnlyAdminMixin
from agentportal.errors import DomainError
from approvals import plans
from approvals.models import (
    TICKET_OPEN_STATUSES,
    BusinessEvent,
    Confirmation,
    PlanDecision,
    PlanReview,
    Proposal,
    TicketStatus,
)


class ProposalInline(HistoryInline):
    model = Proposal
    fields = readonly_fields = ["version", "summary", "items", "note", "created_by", "created_at"]


class ConfirmationInline(HistoryInline):
    model = Confirmation
    fields = readonly_fields = ["proposal_version", "customer", "created_at"]


class PlanReviewInline(HistoryInline):
    model = PlanReview
    fields = readonly_fields = ["proposal_version", "decision", "note", "reviewer", "created_at"]


class BusinessEventInline(HistoryInline):
    model = BusinessEvent
    fields = readonly_fields = ["id", "kind", "proposal_version", "actor", "data", "created_at"]
    ordering = ["id"]


class ReviseForm(forms.Form):
    # The version the supervisor looked at: a colleague's newer one is never overwritten.
    proposal_version = forms.IntegerField(widget=forms.HiddenInput)
    items = forms.JSONField(
        label="Items of the new version",
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60}),
        help_text='[{"sku": "...", "new_sku": "...", "quantity": 1}]',
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ReviewForm(forms.Form):
    proposal_version = forms.IntegerField(widget=forms.HiddenInput)
    decision = forms.ChoiceField(choices=PlanDecision.choices, widget=forms.RadioSelect)
    note = forms.CharField(
        required=False,
        label="Note (the customer is told; needed to reject)",
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class TicketAdmin(ReadOnlyAdminMixin, MerchantScopedAdmin):
    list_display = ["short_id", "status", "order", "customer", "version", "run_link", "updated_at"]
    list_filter = ["status", "merchant"]
    list_select_related = ["order", "customer", "merchant"]
    search_fields = ["id", "order__number", "customer__username"]
    inlines = [ProposalInline, ConfirmationInline, PlanReviewInline, BusinessEventInline]
    readonly_fields = [
        "id",
        "status",
        "version",
        "order",
        "customer",
        "run_link",
        "merchant",
        "created_at",
        "updated_at",
        "review_link",
        "revise_link",
    ]
    fields = readonly_fields

    def get_list_filter(self, request):
        return self.list_filter if request.user.is_superuser else ["status"]

    @admin.display(description="ticket")
    def short_id(self, ticket):
        return str(ticket.pk)[:8]

    @admin.display(description="run")
    def run_link(self, ticket):
        url = reverse("admin:runs_agentrun_change", args=[ticket.run_id])
        return format_html('<a href="{}">{}</a>', url, str(ticket.run_id)[:8])

    @admin.display(description="review")
    def review_link(self, ticket):
        if ticket.status != TicketStatus.WAITING_REVIEW:
            return "-"
        url = reverse("admin:approvals_ticket_review", args=[ticket.pk])
        return format_html('<a class="button" href="{}">Approve or reject</a>', url)

    @admin.display(description="revise")
    def revise_link(self, ticket):
        if ticket.status not in TICKET_OPEN_STATUSES:
            return "-"
        url = reverse("admin:approvals_ticket_revise", args=[ticket.pk])
        return format_html('<a class="button" href="{}">Propose a new version</a>', url)

    def get_urls(self):
        return [
            path(
                "<uuid:ticket_id>/revise/",
                self.admin_site.admin_view(self.revise_view),
                name="approvals_ticket_revise",
            ),
            path(
                "<uuid:ticket_id>/review/",
                self.admin_site.admin_view(self.review_view),
                name="approvals_ticket_review",
            ),
            *super().get_urls(),
        ]

    def revise_view(self, request, ticket_id):
        """A new version with edited items, for the customer to confirm again."""
        return self._command_page(
            request,
            ticket_id,
            form_class=ReviseForm,
            initial=lambda current: {"items": current.items},
            command=lambda ticket, principal, data: plans.ticket_revise(
                ticket=ticket, principal=principal, **data
            ),
            done=lambda ticket: f"Version {ticket.version} proposed to the customer.",
            title="Revise the plan for {order}",
            submit="Propose this version",
        )

    def review_view(self, request, ticket_id):
        """Approve or reject the version the customer confirmed."""
        return self._command_page(
            request,
            ticket_id,
            form_class=ReviewForm,
            initial=lambda current: {},
            command=lambda ticket, principal, data: plans.ticket_decide(
                ticket=ticket, principal=principal, **data
            ),
            done=lambda ticket: f"Plan for {ticket.order}: {ticket.get_status_display()}.",
            title="Review the plan for {order}",
            submit="Record the decision",
        )

    def _command_page(
        self, request, ticket_id, *, form_class, initial, command, done, title, submit
    ):
        """A plan command's page: the form carries the version the supervisor saw, so a plan
        that changed meanwhile is refused (409), never acted on unseen."""
        ticket = get_object_or_404(self.get_queryset(request), pk=ticket_id)
        current = ticket.proposals.get(version=ticket.version)
        form = form_class(
            request.POST or None,
            initial={"proposal_version": current.version, **initial(current)},
        )
        if request.method == "POST" and form.is_valid():
            try:
                ticket = command(
                    ticket,
                    plans.ticket_principal(ticket=ticket, user=request.user),
                    form.cleaned_data,
                )
            except DomainError as refusal:
                for error in refusal.errors or []:
                    form.add_error(None, f"{error['field']}: {error['message']}")
                form.add_error(None, refusal.detail)
            else:
                self.message_user(request, done(ticket))
                return redirect("admin:approvals_ticket_change", ticket.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": title.format(order=ticket.order),
            "ticket": ticket,
            "current": current,
            "form": form,
            "submit": submit,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/approvals/ticket/command.html", context)
