"""The portal's pages: the supervisor's inbox, plans, and the customer's chat (a call's page
is approval_views)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from agentportal import errors
from agentportal.admin import supervises_any
from agentportal.errors import DomainError
from agentportal.principals import Principal
from approvals import customer_words, plans, selectors
from approvals.models import TICKET_OPEN_STATUSES, PlanDecision, TicketStatus
from approvals.plans import selectors as plan_selectors
from approvals.portal import chat, inbox, live
from runs import commands, conversations
from runs.models import Conversation


@never_cache
@login_required
def portal_home(request):
    """Supervisors land on their inbox, customers on their chat."""
    if supervises_any(request.user):
        return render(request, "portal/inbox.html", _inbox_context(request))
    if selectors.customer_membership(user=request.user) is not None:
        return redirect("portal-chat")
    return customer_requests(request)


@never_cache
@login_required
def customer_requests(request):
    """The customer's earlier requests, where each stands, in plain words."""
    runs = selectors.runs_of_customer(user=request.user)[:20]
    for run in runs:
        run.standing = customer_words.RUN_STANDING.get(run.status, "")
        # A run started through the API has no chat message: its last question is the one.
        run.asked = run.asked or next(
            (m.get("content", "") for m in reversed(run.messages) if m.get("role") == "user"), ""
        )
    return render(request, "portal/customer_home.html", {"runs": runs})


@never_cache
@login_required
def inbox_rows(request):
    """The inbox's live part, polled by htmx."""
    if not supervises_any(request.user):
        raise Http404
    return render(request, "portal/_inbox_rows.html", _inbox_context(request))


@never_cache
@login_required
def inbox_plans(request):
    """The inbox's plans, polled by htmx."""
    if not supervises_any(request.user):
        raise Http404
    return render(request, "portal/_plan_rows.html", _inbox_context(request))


def _inbox_context(request) -> dict:
    # Read before the rows: a change in between is then shown, and heard again.
    seen = live.inbox_digest(request.user.pk)
    context = inbox.inbox_context(
        user=request.user, sort=request.GET.get("sort"), view=request.GET.get("view")
    )
    return {**context, "seen": seen}


# --- a plan ------------------------------------------------------------------------------------


class PlanForm(forms.Form):
    action = forms.ChoiceField(
        choices=[
            ("confirm", "confirm"),
            ("changes", "changes"),
            ("approve", "approve"),
            ("reject", "reject"),
        ]
    )
    proposal_version = forms.IntegerField(min_value=1)
    note = forms.CharField(required=False, max_length=2000)


PLAN_DONE = {
    "confirm": "Confirmed: a person of the shop now reviews the plan.",
    "changes": "Your request for changes was sent; you will get a new plan to confirm.",
    "approve": "Approved: the agent carries on with the exchange.",
    "reject": "Rejected: the agent tells the customer why.",
}


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def ticket_page(request, ticket_id):
    ticket = selectors.ticket_for_user(user=request.user, ticket_id=ticket_id)
    if ticket is None:
        raise Http404("No such plan for you.")
    form = PlanForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        action = form.cleaned_data["action"]
        common = {
            "ticket": ticket,
            "principal": _plan_principal(ticket, request.user),
            "proposal_version": form.cleaned_data["proposal_version"],
        }
        note = form.cleaned_data["note"]
        try:
            if action == "confirm":
                plans.ticket_confirm(**common)
            elif action == "changes":
                plans.ticket_revise(**common, note=note)
            else:
                plans.ticket_decide(**common, decision=PlanDecision(action), note=note)
            messages.success(request, PLAN_DONE[action])
            return redirect("portal-ticket", ticket_id=ticket.pk)
        except DomainError as error:
            _plan_explain(request, form, error)
    ticket.refresh_from_db()
    return render(request, "portal/ticket.html", _ticket_context(request, ticket, form))


def _plan_principal(ticket, user) -> Principal:
    try:
        return plans.ticket_principal(ticket=ticket, user=user)
    except DomainError as error:
        raise Http404(error.detail) from error


def _plan_explain(request, form: PlanForm, refusal: DomainError) -> None:
    """A plan that moved on meanwhile is news for the page, not an error page."""
    if isinstance(refusal, errors.VersionConflict):
        messages.warning(request, "The plan was revised meanwhile: here is the new version.")
    elif isinstance(refusal, errors.InvalidTransition):
        messages.warning(request, f"Nothing was changed: {refusal.detail}")
    elif refusal.errors:
        for error in refusal.errors:
            form.add_error(None, error["message"])
    else:
        form.add_error(None, refusal.detail)


def _ticket_context(request, ticket, form: PlanForm) -> dict:
    is_customer = ticket.customer_id == request.user.pk
    current = ticket.proposals.get(version=ticket.version)
    return {
        "ticket": ticket,
        "seen": live.ticket_digest(ticket),
        "form": form,
        "is_customer": is_customer,
        "shop": ticket.merchant.name,
        "standing": customer_words.ticket_standing(ticket.status, ticket.merchant.name),
        "lines": customer_words.plan_lines(ticket.order, current.items),
        "proposals": ticket.proposals.order_by("-version"),
        "current": current,
        "confirmation": ticket.confirmations.filter(proposal_version=ticket.version).first(),
        "review": ticket.reviews.filter(proposal_version=ticket.version).first(),
        "changes_requested": plan_selectors.plan_changes_requested(ticket),
        "plan_diff": plan_selectors.plan_diff(ticket),
        "can_confirm": is_customer and ticket.status == TicketStatus.WAITING_CONFIRMATION,
        "can_review": not is_customer and ticket.status == TicketStatus.WAITING_REVIEW,
        "can_revise": not is_customer and ticket.status in TICKET_OPEN_STATUSES,
    }


# --- the customer's chat ----------------------------------------------------------------------


class ChatForm(forms.Form):
    MAX_LENGTH = 4000
    text = forms.CharField(strip=True)
    # The customer was told what starting over cancels, and starts over anyway.
    confirmed = forms.BooleanField(required=False)

    def clean_text(self) -> str:
        # By how much, which a customer can act on; a limit alone would make them count.
        text = self.cleaned_data["text"]
        over = len(text) - self.MAX_LENGTH
        if over > 0:
            raise forms.ValidationError(
                f"Your message is {over} character{'s' if over > 1 else ''} too long to send "
                f"({self.MAX_LENGTH} at most). Please shorten it and send it again.",
                code="max_length",
            )
        return text


def _chat_principal(request) -> Principal:
    principal = selectors.chat_principal(user=request.user)
    if principal is None:
        raise Http404("You are not a customer of any shop.")
    return principal


def _chat_conversation(principal: Principal, *, create: bool) -> Conversation | None:
    """The customer's current conversation; a new one is made only when the customer writes
    (reading the page writes nothing)."""
    current = selectors.chat_conversation(principal=principal)
    if current is None and create:
        current = conversations.conversation_create(
            merchant=principal.merchant, customer=principal.user
        )
    return current


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def chat_page(request):
    principal = _chat_principal(request)
    conversation = _chat_conversation(principal, create=request.method == "POST")
    form = ChatForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        text = form.cleaned_data["text"]
        try:
            cancelled = _cancelled_by(conversation, principal, text)
            if cancelled and not form.cleaned_data["confirmed"]:
                # The box stays empty: the confirmation sends /new itself.
                context = {
                    **chat.chat_context(conversation),
                    "form": ChatForm(),
                    "cancels": cancelled,
                }
                return render(request, "portal/chat.html", context)
            executed = commands.command_execute(
                conversation=conversation, principal=principal, text=text
            )
            if executed is None:
                conversations.message_send(conversation=conversation, text=text)
            else:
                command, result = executed
                said = _command_message(command.name, result)
                if request.htmx:
                    # The Stop button: the page stays, and so does the answer being written.
                    return _chat_notice(request, said)
                messages.info(request, said)
            return redirect("portal-chat")
        except DomainError as error:
            if request.htmx:
                return _chat_notice(request, error.detail, level="warning")
            form.add_error("text", error.detail)
    return render(request, "portal/chat.html", {**chat.chat_context(conversation), "form": form})


def _chat_notice(request, notice: str, *, level: str = "info") -> HttpResponse:
    return render(request, "portal/_chat_notice.html", {"notice": notice, "level": level})


def _cancelled_by(conversation: Conversation, principal: Principal, text: str) -> list[str]:
    """What sending `text` would cancel that waits on people: /new ends the conversation and
    its runs, a refund or a plan waiting for a supervisor with them."""
    parsed = commands.command_parse(text, role=principal.role)
    if parsed is None or parsed[0].name != "/new":
        return []
    return selectors.waits_of_conversation(conversation=conversation)


@never_cache
@login_required
def chat_messages(request):
    """The chat's live part, polled by htmx with the digest of what the page shows: 204
    while that is still what it would show."""
    conversation = _chat_conversation(_chat_principal(request), create=False)
    context = chat.chat_context(conversation)
    if request.GET.get("seen") == context["digest"]:
        return HttpResponse(status=204)
    return render(request, "portal/_chat_messages.html", context)


def _command_message(name: str, result: dict) -> str:
    if name == "/new":
        return "Started a new conversation."
    if name == "/reset":
        return "Started afresh: the assistant forgets this conversation's earlier messages."
    if name == "/switch":
        return "Switched to the other conversation."
    if name == "/stop":
        return "Stopped." if result.get("cancelled_run_id") else "Nothing was running."
    if name == "/status":
        run = result.get("active_run")
        state = (
            f"Your request is {customer_words.RUN_STANDING.get(run['status'], 'being answered')}."
            if run
            else "The assistant is not working on anything."
        )
        waiting = result["pending_messages"]
        if waiting:
            state += (
                " 1 more message waits its turn."
                if waiting == 1
                else f" {waiting} more messages wait their turn."
            )
        return state
    return f"{name} done."
