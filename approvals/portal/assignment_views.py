"""Taking a call from the inbox or its page ("I'm on it"), through approvals.gate.assignment:
a call nobody has is claimed; one a colleague or a group has is taken over from its page,
which says who had it."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agentportal.errors import DomainError
from agentportal.selectors import principal_for_user
from approvals import selectors
from approvals.gate import assignment


@login_required
@require_POST
def approval_claim(request, interrupt_id: str):
    approval = (
        selectors.approvals_for_supervisor(user=request.user)
        .filter(interrupt_id=interrupt_id)
        .first()
    )
    principal = approval and principal_for_user(user=request.user, merchant=approval.merchant)
    if principal is None:
        raise Http404("No such call in your shops.")
    try:
        if approval.is_assigned:
            # Its page says who has it; the button there says "Take it over".
            assignment.approval_assign(
                approval=approval,
                principal=principal,
                assignee=assignment.Assignee(user=request.user),
            )
        else:
            assignment.approval_assign(
                approval=approval, principal=principal, assignee=assignment.NOBODY, claim=True
            )
        messages.success(request, "You are on it: your colleagues see the call is yours.")
    except DomainError as refusal:
        messages.error(request, refusal.detail)
    return redirect(_back(request, interrupt_id))


def _back(request, interrupt_id: str) -> str:
    """Where the button was pressed: the inbox (its view kept) or the call's page."""
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return back
    return reverse("portal-approval", kwargs={"interrupt_id": interrupt_id})
