"""A run's timeline in words: what the model asked for, what each tool answered, and a
domain's own events in the words it registered."""

import pytest

from runs.extensions import ExtensionError
from runs.models import RunEvent
from runs.timeline import event_sentence, timeline_sentence_register


def _event(type_: str, **data) -> RunEvent:
    return RunEvent(type=type_, data=data)


def test_each_step_reads_as_a_sentence():
    assert (
        event_sentence(
            _event(
                "model.responded",
                tool_calls=["find_locker"],
                usage={"total_tokens": 155},
                latency_ms=812,
            )
        )
        == "The model asked to call find_locker (155 tokens, 812 ms)"
    )
    assert (
        event_sentence(
            _event(
                "tool.result",
                tool="find_locker",
                status="SUCCEEDED",
                result={"parcel_id": "PCL-3", "lockers": [{"name": "A"}, {"name": "B"}]},
            )
        )
        == "find_locker succeeded: lockers 2 items, parcel id PCL-3"
    )
    assert event_sentence(_event("run.cancelled", reason="stopped by the customer")) == (
        "Cancelled: stopped by the customer"
    )
    assert event_sentence(_event("something.new", detail="x")) == "something.new: detail x"


def test_a_long_answer_is_shortened():
    sentence = event_sentence(_event("message.assistant", text="word " * 200))
    assert len(sentence) < 270 and sentence.endswith("…”")


def test_a_domains_event_reads_in_the_words_it_registered_with_the_decider_for_those_who_may_know():
    # given the test extension's sign-off request, whose sentence it registered
    requested = _event("signoff.requested", interrupt_id="int-7", note="the audit")

    # when read without and with the name of who decided it
    anonymous = event_sentence(requested)
    named = event_sentence(requested, decided_by={"int-7": "sid"})

    # then each reads in the extension's words, the name only where it was given
    assert anonymous == "Waiting for a sign-off: the audit"
    assert named == "Waiting for a sign-off: the audit (decided by sid)"


@pytest.mark.parametrize("event_type", ["signoff.requested", "run.completed"])
def test_an_event_type_already_said_cannot_be_registered_again(event_type):
    with pytest.raises(ExtensionError):
        timeline_sentence_register(event_type, lambda data, decider: "")
