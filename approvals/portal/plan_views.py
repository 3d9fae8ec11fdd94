"""The portal's page where a supervisor proposes a new version of an exchange plan, picking
products and sizes from the shop's stock instead of editing the admin's JSON."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from agentportal import errors
from agentportal.errors import DomainError
from approvals import plans, selectors
from approvals.models import Ticket, TicketStatus
from approvals.plans import selectors as plan_selectors
from approvals.portal.forms import PlanLineFormSet, PlanRevisionForm

# Why a plan that is no longer open cannot get a new version.
CLOSED = {
    TicketStatus.APPROVED: "This plan was approved: it is being carried out and can no longer "
    "be revised.",
    TicketStatus.REJECTED: "This plan was rejected: it is closed and can no longer be revised.",
    TicketStatus.CANCELLED: "This plan was cancelled with its run (stopped, or nobody answered "
    "in time): it is closed and can no longer be revised.",
}


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def ticket_revise_page(request, ticket_id):
    """GET: the current plan as pickers; POST: propose it as the next version."""
    ticket = selectors.tickets_for_supervisor(user=request.user).filter(pk=ticket_id).first()
    if ticket is None:
        raise Http404("No such plan in your shops.")
    data = request.POST if request.method == "POST" and ticket.status not in CLOSED else None
    form, lines = _revision_forms(ticket, data)
    if data is not None and not lines.management_form.is_valid():
        # Not what this page's form sends: start again from the plan, not from half a form.
        messages.warning(request, "The form arrived incomplete; nothing was changed.")
        data = None
        form, lines = _revision_forms(ticket, data)
    if data is not None and form.is_valid() and lines.is_valid():
        try:
            ticket = plans.ticket_revise(
                ticket=ticket,
                principal=plans.ticket_principal(ticket=ticket, user=request.user),
                proposal_version=form.cleaned_data["proposal_version"],
                note=form.cleaned_data["note"],
                items=[line.item() for line in lines],
            )
        except (errors.VersionConflict, errors.InvalidTransition, errors.InterruptExpired):
            # News, not a mistake: show the plan as it is now, with fresh pickers.
            ticket.refresh_from_db()
            messages.warning(request, _changed_meanwhile(ticket))
            form, lines = _revision_forms(ticket, None)
        except DomainError as refusal:
            for error in refusal.errors or [{"message": refusal.detail}]:
                form.add_error(None, error["message"])
        else:
            messages.success(
                request,
                f"Version {ticket.version} proposed: the customer is asked to confirm it.",
            )
            return redirect("portal-ticket", ticket_id=ticket.pk)
    return render(
        request,
        "portal/ticket_revise.html",
        {
            "ticket": ticket,
            "current": ticket.proposals.get(version=ticket.version),
            "closed": CLOSED.get(ticket.status, ""),
            "form": form,
            "lines": lines,
            "changes_requested": plan_selectors.plan_changes_requested(ticket),
        },
    )


def _revision_forms(ticket: Ticket, data) -> tuple[PlanRevisionForm, PlanLineFormSet]:
    """The note and version, and one line form per line of the current version."""
    current = ticket.proposals.get(version=ticket.version)
    products = plan_selectors.plan_product_choices(
        ticket.order, also=[line["new_sku"] for line in current.items]
    )
    form = PlanRevisionForm(data, initial={"proposal_version": ticket.version})
    lines = PlanLineFormSet(
        data,
        prefix="lines",
        initial=[
            {"product": line["sku"], "size": line["new_sku"], "quantity": line["quantity"]}
            for line in current.items
        ],
        form_kwargs={"products": products},
    )
    return form, lines


def _changed_meanwhile(ticket: Ticket) -> str:
    if ticket.status in CLOSED:
        return f"The plan changed meanwhile: {CLOSED[ticket.status]} Nothing was changed."
    latest = ticket.proposals.select_related("created_by").get(version=ticket.version)
    who = latest.created_by.username if latest.created_by else "the assistant"
    return (
        f"The plan changed meanwhile: {who} proposed version {ticket.version}. Nothing was "
        "changed; here it is, choose again."
    )
