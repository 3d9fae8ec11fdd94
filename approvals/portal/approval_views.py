"""The supervisor's page for one call: what it is about, and the decision on it. A decision
counts for the arguments the page showed (their digest goes with every form); an edit is never
approved unreviewed nor dropped for an approve as proposed; a revision is judged by the same
warnings as the call, and one that cannot be paid is not approved."""

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from agentportal import errors
from agentportal.errors import DomainError
from approvals import selectors
from approvals.gate import attention, calls, decision_context, services
from approvals.gate.decision_context import money
from approvals.models import Approval, ApprovalStatus, Decision
from approvals.portal import live
from approvals.portal.forms import ArgumentsForm, DecisionForm
from runs import timeline
from runs.models import RunStatus
from runs.tools import TOOLS

EDITED = "You changed the arguments: review your changes, or reload to approve as proposed."


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def approval_page(request, interrupt_id: str):
    approval = (
        selectors.approvals_for_supervisor(user=request.user)
        .filter(interrupt_id=interrupt_id)
        .first()
    )
    if approval is None:
        raise Http404("No such call in your shops.")
    if request.method == "GET":
        attention.approval_seen_record(approval=approval, user=request.user)
    form = DecisionForm(request.POST or None)
    typed = _typed_form(approval, request.POST if ArgumentsForm.submitted(request.POST) else None)
    typed_used = typed is not None and typed.is_bound
    revision, changed_meanwhile = None, False
    if request.method == "POST" and form.is_valid():
        action = form.cleaned_data["action"]
        tool_args = form.cleaned_data["tool_args"]
        if typed_used and action in ("preview", Decision.REVISE):
            tool_args = typed.arguments() if typed.is_valid() else None
        if action == Decision.APPROVE and _edited(
            request, form, typed if typed_used else None, approval
        ):
            # Sent from a page without its script: the edit is neither paid nor dropped.
            form.add_error(None, EDITED)
        # An argument the typed form could not read is said beside its field already.
        elif action == Decision.APPROVE or not (typed_used and typed.errors):
            try:
                if action == "preview":
                    revision = _revision(approval, _validated(approval, tool_args))
                else:
                    if action == Decision.REVISE:
                        _refuse_if_blocked(approval, _validated(approval, tool_args))
                    run, decided = services.approval_decide_as_user(
                        approval=approval,
                        user=request.user,
                        decision=action,
                        tool_args=tool_args if action == Decision.REVISE else None,
                        reason=form.cleaned_data["reason"],
                        args_digest=form.cleaned_data["args_digest"] or None,
                    )
                    messages.success(request, decided_message(action, decided, run))
                    return redirect("portal-approval", interrupt_id=interrupt_id)
            except errors.ArgumentsChanged:
                # News, not a mistake: the page shows the arguments now on the table, and
                # offers no approve until it is loaded again.
                approval.refresh_from_db()
                messages.warning(request, changed_meanwhile_said(approval))
                changed_meanwhile, typed = True, _typed_form(approval, None)
            except DomainError as error:
                _explain(request, form, error, typed if typed_used else None)
        approval.refresh_from_db()
    return render(
        request,
        "portal/approval.html",
        _page_context(request, approval, form, typed, revision, changed_meanwhile),
    )


def _page_context(request, approval, form, typed, revision, changed_meanwhile) -> dict:
    approvals = decision_context.approvals_context(approval, user=request.user)
    on_the_table = approval.arguments_on_the_table
    amount = _amount_said(approval, on_the_table)
    if amount:
        approvals["approve_label"] = (
            f"Approve {approvals['revised_by']}'s changes: {amount}"
            if approvals["revised_by"]
            else f"Approve {amount} as proposed"
        )
    edited = (
        not changed_meanwhile
        and request.method == "POST"
        and _edited(
            request, form, typed if typed is not None and typed.is_bound else None, approval
        )
    )
    return {
        "approval": approval,
        "form": form,
        "typed": typed,
        "revision": revision,
        "json_open": typed is None or ("tool_args" in request.POST and not changed_meanwhile),
        "editable": (
            json.dumps(on_the_table, indent=2)
            if changed_meanwhile
            else _editable(request, form, approval, revision)
        ),
        "table_json": json.dumps(on_the_table, indent=2),
        "timeline": timeline.run_timeline(
            approval.run,
            decided_by={
                decided.interrupt_id: decided.decided_by_name
                for decided in approval.run.approvals.select_related("decided_by", "merchant")
            },
        ),
        "pending": approval.status == ApprovalStatus.PENDING_APPROVAL,
        "seen": live.approval_digest(approval),
        # What the supervisor decides on: the arguments the page first showed them, or after
        # a colleague's change, the ones it shows now.
        "args_seen": (
            approval.digest_on_the_table
            if changed_meanwhile
            else request.POST.get("args_digest") or approval.digest_on_the_table
        ),
        # Edited arguments are approved through their review, never as proposed.
        "edited": edited,
        **decision_context.approval_decision_context(approval),
        **approvals,
        "can_approve": approvals["can_approve"] and not changed_meanwhile,
        "siblings": decision_context.siblings_context(approval),
    }


def _typed_form(approval: Approval, data) -> ArgumentsForm | None:
    """A field per argument of the call's tool; a refund's order is picked from the customer's
    orders, never typed."""
    tool = TOOLS.get(approval.tool_name)
    if tool is None:
        return None
    on_the_table = approval.arguments_on_the_table
    choices = None
    if approval.tool_name == "issue_refund":
        choices = {"order_id": _order_choices(approval, str(on_the_table.get("order_id") or ""))}
    return ArgumentsForm(tool.args_model, on_the_table, data, choices=choices)


def _order_choices(approval: Approval, current: str) -> list[tuple[str, str]]:
    orders = selectors.orders_for_customer(
        merchant_id=approval.merchant_id, customer_id=approval.run.account_id
    ).order_by("number")
    choices = [
        (order.number, f"{order.number} · {money(order.refundable, order.currency)} refundable")
        for order in orders
    ]
    if current and current.upper() not in {number for number, _ in choices}:
        # What the model named stays on the page as it is, said for what it is.
        choices.insert(0, (current, f"{current} · not an order of this customer"))
    return choices


def _edited(request, form: DecisionForm, typed: ArgumentsForm | None, approval) -> bool:
    """Whether the arguments sent with a decision differ from those on the table, when they
    were sent on the page showing those (a colleague's change is said otherwise)."""
    if form.cleaned_data.get("args_digest") not in ("", None, approval.digest_on_the_table):
        return False
    if typed is not None:
        return typed.has_changed()
    text = request.POST.get("tool_args")
    if text is None:
        return False
    try:
        return json.loads(text) != approval.arguments_on_the_table
    except json.JSONDecodeError:
        return True


def changed_meanwhile_said(approval: Approval) -> str:
    """Who changed the call's arguments, and to what, while the supervisor looked at them."""
    vote = approval.votes.select_related("user", "approval__merchant").order_by("-pk").first()
    who = vote.voter_name if vote else "Someone"
    amount = _amount_said(approval, approval.arguments_on_the_table)
    what = f"changed this to {amount}" if amount else "changed the arguments"
    return (
        f"{who} {what} while you were looking. Nothing was recorded: here is the call as it is now."
    )


def _amount_said(approval: Approval, arguments: dict[str, Any]) -> str:
    """A refund's amount with its order's currency ("4000.00 EUR"); empty for other calls."""
    if approval.tool_name != "issue_refund" or arguments.get("amount") is None:
        return ""
    number = str(arguments.get("order_id") or approval.proposed_args.get("order_id") or "")
    order = selectors.order_for_customer(
        merchant_id=approval.merchant_id, customer_id=approval.run.account_id, number=number
    )
    return money(arguments["amount"], order.currency if order else "")


def _revision(approval: Approval, revised: dict) -> dict[str, Any]:
    """The review of a revision: what changed, what looks wrong with it, and what approving it
    executes."""
    concerns = decision_context.revision_concerns(approval, revised)
    amount = _amount_said(approval, revised)
    return {
        "diff": _diff(approval, revised),
        "concerns": concerns,
        "blocked": any(concern.blocking for concern in concerns),
        "is_refund": approval.tool_name == "issue_refund",
        "arguments": json.dumps(revised),
        "label": f"Approve the revised call: {amount}" if amount else "Approve the revised call",
    }


def _refuse_if_blocked(approval: Approval, revised: dict) -> None:
    for concern in decision_context.revision_concerns(approval, revised):
        if concern.blocking:
            text = concern.text
            said = text[0].lower() + text[1:] if text[1:2].islower() else text
            raise errors.InvalidInput(f"This revision cannot be approved: {said}")


def _editable(request, form: DecisionForm, approval: Approval, revision) -> str:
    """The arguments' text in the editor: what the supervisor sent, kept as typed (an error
    must not lose an edit), or as reviewed once valid; else the ones an approval approves."""
    if revision and form.cleaned_data["tool_args"] is not None:
        return json.dumps(form.cleaned_data["tool_args"], indent=2)
    if request.method == "POST" and "tool_args" in request.POST:
        return request.POST["tool_args"]
    return json.dumps(approval.arguments_on_the_table, indent=2)


def _validated(approval: Approval, tool_args) -> dict:
    tool = TOOLS.get(approval.tool_name)
    if not isinstance(tool_args, dict):
        raise errors.InvalidInput(
            "Edit the arguments as a JSON object.",
            errors=[{"field": "tool_args", "message": "a JSON object"}],
        )
    return calls.tool_args_validate(tool, tool_args) if tool else tool_args


def _diff(approval: Approval, revised: dict) -> list[dict]:
    keys = sorted(set(approval.proposed_args) | set(revised))
    return [
        {
            "field": key,
            "proposed": approval.proposed_args.get(key),
            "revised": revised.get(key),
            "changed": approval.proposed_args.get(key) != revised.get(key),
        }
        for key in keys
    ]


def decided_message(action: str, approval: Approval, run) -> str:
    if approval.status == ApprovalStatus.PENDING_APPROVAL:
        # The first of two approvals: nothing runs yet.
        given = f"{len(approval.current_votes)} of {approval.required_approvals} approvals"
        if action == Decision.REVISE:
            return (
                f"Your changes count as your approval ({given}): another supervisor must "
                "approve them before the agent runs the call."
            )
        return f"Approved ({given}): another supervisor must approve it too before it runs."
    if run.status == RunStatus.WAITING_APPROVAL:
        # Calls asked for together: the agent goes on once the last of them is decided.
        return {
            "approve": "Approved. The agent goes on once the calls asked for together with "
            "it are decided too.",
            "revise": "Approved with your changes. The agent goes on once the calls asked for "
            "together with it are decided too.",
            "reject": "Rejected. The agent goes on, and tells the customer why, once the calls "
            "asked for together with it are decided too.",
        }[action]
    return {
        "approve": "Approved: the agent carries on and runs the call.",
        "revise": "Approved with your changes: the agent runs the revised call.",
        "reject": "Rejected: the agent tells the customer why.",
    }[action]


def _explain(
    request, form: DecisionForm, refusal: DomainError, typed: ArgumentsForm | None = None
) -> None:
    """Someone else deciding first, or the call expiring, is news for the page, not an
    error page. An argument's error goes beside its field (or the JSON editor)."""
    if isinstance(refusal, errors.AlreadyDecided):
        when = refusal.context.get("decided_at", "")[:16].replace("T", " ")
        messages.warning(
            request,
            f"{refusal.context.get('decided_by')} already decided this call "
            f"({refusal.context.get('decision')}, {when} UTC). Nothing was changed.",
        )
    elif isinstance(refusal, errors.InterruptExpired):
        messages.warning(request, "This call expired before your decision; nothing was run.")
    elif isinstance(refusal, errors.RunFinished):
        messages.warning(request, "The run was cancelled or has ended; nothing was run.")
    elif isinstance(refusal, errors.SameApprover):
        # Two tabs, or a page drawn before this person's own approval: said, not an error page.
        messages.warning(request, f"{refusal.detail} Nothing was changed.")
    elif refusal.errors:
        # An argument's error goes beside the editor, named as the arguments name it.
        for error in refusal.errors:
            field, _, argument = error["field"].partition(".")
            if field == "tool_args" and typed is not None and argument in typed.fields:
                typed.add_error(argument, error["message"])
            elif field == "tool_args":
                form.add_error("tool_args", f"{argument or 'arguments'}: {error['message']}")
            else:
                form.add_error(None, f"{error['field']}: {error['message']}")
    else:
        form.add_error(None, refusal.detail)
