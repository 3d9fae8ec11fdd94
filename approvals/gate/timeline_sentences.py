"""The timeline's sentences for the gate's events on a run (runs.timeline says the runtime's
own): a call waiting for people, who took it, each approval given, the decision, an
escalation and a refusal when carried out."""

from runs.timeline import at_words, shortened, timeline_sentence_register, value_words


def _approval_requested(data: dict, decider: str | None) -> str:
    return (
        f"Waiting for a person to decide {data.get('tool_name')} "
        f"({value_words(data.get('tool_args') or {})}) until {at_words(data.get('expires_at', ''))}"
    )


DECIDED = {"approve": "Approved", "revise": "Revised", "reject": "Rejected"}


def _approval_decided(data: dict, decider: str | None) -> str:
    who = decider or data.get("decided_by") or "someone"
    if data.get("by_policy"):
        who = f"the shop's policy ({data.get('decided_by')}), with no person"
    decision = data.get("decision", "")
    said = f"{DECIDED.get(decision, f'Decided ({decision})')} by {who}"
    if data.get("reason"):
        said += f": “{data['reason']}”"
    if data.get("decision") == "revise" and data.get("tool_args"):
        said += f"; to run with {value_words(data['tool_args'])}"
    return said


def _approval_given(data: dict, decider: str | None) -> str:
    """One approval of a call that needs more: who, how many of how many, what runs."""
    decision = data.get("decision", "")
    said = (
        f"{DECIDED.get(decision, f'Decided ({decision})')} by {data.get('by') or 'someone'}: "
        f"{data.get('approvals_given')} of {data.get('required_approvals')} approvals, "
        "waiting for another"
    )
    if decision == "revise" and data.get("tool_args"):
        said += f"; to run with {value_words(data['tool_args'])}"
    return said


def _approval_escalated(data: dict, decider: str | None) -> str:
    return (
        f"Escalated: undecided since {at_words(data.get('waiting_since', ''))}, "
        f"expires {at_words(data.get('expires_at', ''))}"
    )


def _approval_assigned(data: dict, decider: str | None) -> str:
    # Staff are not named here: the customer reads the run's events too.
    if data.get("claimed"):
        return "Taken by a supervisor"
    if data.get("to") == "group":
        return f"Assigned to the group {data.get('group')}"
    if data.get("to") == "person" and data.get("stands_in"):
        return "Assigned to a supervisor standing in for a colleague who is away"
    if data.get("to") == "person":
        return "Assigned to a supervisor"
    return "Unassigned: back in everyone's inbox"


def _approval_failed(data: dict, decider: str | None) -> str:
    error = (data.get("result") or {}).get("error", "")
    return f"{data.get('tool_name')} failed when carried out: {shortened(str(error))}"


def timeline_sentences_register() -> None:
    timeline_sentence_register("approval.requested", _approval_requested)
    timeline_sentence_register("approval.approval_given", _approval_given)
    timeline_sentence_register("approval.decided", _approval_decided)
    timeline_sentence_register("approval.escalated", _approval_escalated)
    timeline_sentence_register("approval.assigned", _approval_assigned)
    timeline_sentence_register("approval.failed", _approval_failed)
