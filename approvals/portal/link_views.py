"""The page an email's decision link opens (approvals.gate.decision_links): signed in or not,
it shows the call as the supervisor would weigh it and asks to confirm with one button. Only
that button's POST decides: a mail scanner or a preview following the link decides nothing.
The form carries the token in its body, so no request that decides has it in its address."""

from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from agentportal import errors
from agentportal.errors import DomainError
from approvals import customer_words
from approvals.gate import decision_context, decision_links
from approvals.models import Decision, DecisionLink
from approvals.portal.approval_views import decided_message


@never_cache
@require_http_methods(["GET"])
def decision_link_page(request, token: str):
    try:
        link = decision_links.decision_link_read(token=token)
    except errors.NotFound as error:
        return _said(request, None, error.detail, status=404)
    refusal = decision_links.decision_link_refusal(link)
    if refusal:
        return _said(request, link, refusal)
    return _confirm(request, link, token)


@never_cache
@require_POST
def decision_link_confirm(request):
    token = request.POST.get("token", "")
    try:
        link = decision_links.decision_link_read(token=token)
    except errors.NotFound as error:
        return _said(request, None, error.detail, status=404)
    reason = request.POST.get("reason", "").strip()
    if link.decision == Decision.REJECT and not reason:
        return _confirm(request, link, token, error="Say why: the agent tells the customer.")
    try:
        run, approval = decision_links.decision_link_decide(link=link, reason=reason)
    except DomainError as refusal:
        link.refresh_from_db()
        link.approval.refresh_from_db()
        said = decision_links.decision_link_refusal(link) or refusal.detail
        return _said(request, link, f"{said} Nothing was changed by this link.", status=409)
    return _said(request, link, decided_message(link.decision, approval, run), done=True)


def _confirm(request, link: DecisionLink, token: str, error: str = ""):
    approval = link.approval
    return render(
        request,
        "portal/decision_link.html",
        {
            "link": link,
            "approval": approval,
            "token": token,
            "error": error,
            "reason": request.POST.get("reason", ""),
            "button": customer_words.decision_named(approval, link.decision),
            "pending": True,
            **decision_context.approval_decision_context(approval),
            # What the link approves: the arguments on the table when it was sent.
            "arguments": decision_context.readable_arguments(
                approval.tool_name,
                approval.arguments_on_the_table,
                customer_words.on_the_table(approval)[1],
            ),
        },
    )


def _said(request, link: DecisionLink | None, message: str, *, status=200, done=False):
    return render(
        request,
        "portal/decision_link.html",
        {
            "link": link,
            "approval": link.approval if link else None,
            "message": message,
            "done": done,
        },
        status=status,
    )
