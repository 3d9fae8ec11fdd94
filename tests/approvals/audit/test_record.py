"""The decision record: what each step of a gated call writes (who, what, as seen, via, why),
its chain sealed in order and verified, a changed or removed entry named, two sealers at once,
and an archive that keeps the rest verifiable. Decisions go through the API, as people and
integrations make them."""

import io
import itertools
import json
from datetime import timedelta

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from approvals.audit.chain import chain_seal, chain_verify
from approvals.gate.services import approvals_expire_due
from approvals.models import DecisionRecord, RecordChain
from runs import worker
from runs.models import RunEvent
from runs.services import run_cancel
from tests.approvals.policy_helpers import approval_of, policy_set, refund_run, seen
from tests.approvals.refund_helpers import refund_run_waiting
from tests.threads import in_threads


def decide(client, approval, decision="approve", **body):
    return client.post(
        f"/api/v1/approvals/{approval.interrupt_id}/decision",
        {"decision": decision, **seen(approval, decision, body)},
        format="json",
    )


def steps(approval) -> list[tuple[str, str, str, str]]:
    """(kind, actor_kind, actor, via) of the call's entries, in the order they were written."""
    rows = DecisionRecord.objects.filter(interrupt_id=approval.interrupt_id).order_by("id")
    return [(row.kind, row.actor_kind, row.actor, row.via) for row in rows]


@pytest.mark.django_db
def test_an_approved_refund_records_who_asked_who_approved_as_seen_and_what_ran(demo, api):
    # given alice's refund waiting, and sam approving it as he saw it
    waiting = refund_run_waiting()
    digest = waiting.approval.digest_on_the_table

    # when sam approves and the worker runs it
    assert decide(api("sam"), waiting.approval).status_code == 200
    worker.tick()

    # then three entries: the agent asked, sam approved over the API, the worker ran it
    assert steps(waiting.approval) == [
        ("requested", "agent", "agent", ""),
        ("approved", "person", "sam", "api"),
        ("executed", "system", "system", "worker"),
    ]
    approved = DecisionRecord.objects.get(kind="approved")
    assert (approved.seen_digest, approved.args_digest) == (digest, digest)
    assert approved.arguments == waiting.approval.proposed_args
    executed = DecisionRecord.objects.get(kind="executed")
    assert executed.arguments["amount"] == "20.00"


@pytest.mark.django_db
def test_a_policy_approval_a_revision_a_rejection_and_a_refusal_each_say_who_and_why(demo, api):
    # given a policy approving up to 10.00
    policy = policy_set(demo, auto_approve_up_to="10.00")

    # when a refund of 5.00 comes, one of 20.00 is revised to 15.00 by sue, one is rejected,
    # and one revised beyond what the order holds is refused by the tool
    small = approval_of(refund_run(demo, "5"))
    revised = refund_run_waiting().approval
    decide(api("sue"), revised, "revise", tool_args={**revised.proposed_args, "amount": 15})
    rejected = refund_run_waiting("I want a refund for ORD-1001 amount 20").approval
    decide(api("sam"), rejected, "reject", reason='=HYPERLINK("x") not eligible')
    worker.tick()

    # then
    label = f"policy:{policy.pk}@{policy.current.version}"
    assert steps(small) == [
        ("requested", "agent", "agent", ""),
        ("policy_approved", "policy", label, ""),
        ("executed", "system", "system", "worker"),
    ]
    assert [step[0] for step in steps(revised)] == ["requested", "revised", "executed"]
    revision = DecisionRecord.objects.get(interrupt_id=revised.interrupt_id, kind="revised")
    assert (revision.actor, revision.arguments["amount"]) == ("sue", "15.00")
    refusal = DecisionRecord.objects.get(interrupt_id=rejected.interrupt_id, kind="rejected")
    assert refusal.justification == '=HYPERLINK("x") not eligible'


@pytest.mark.django_db
def test_an_expiry_and_a_cancel_are_recorded_as_the_systems(demo):
    expiring = refund_run_waiting()
    cancelled = refund_run_waiting("I want a refund for ORD-1001 amount 20")

    run_cancel(run=cancelled.run, reason="customer left")
    with time_machine.travel(expiring.approval.expires_at + timedelta(seconds=1)):
        approvals_expire_due()

    assert steps(expiring.approval)[-1] == ("expired", "system", "system", "")
    last = DecisionRecord.objects.filter(interrupt_id=cancelled.interrupt_id).last()
    assert (last.kind, last.justification) == ("cancelled", "run_cancelled")


def _sealed_record(demo, api, calls: int = 3):
    for _ in range(calls):
        waiting = refund_run_waiting()
        decide(api("sam"), waiting.approval, "reject", reason="no")
    chain_seal(merchant_id=demo.pk)
    return list(DecisionRecord.objects.filter(merchant=demo).order_by("seq"))


@pytest.mark.django_db
def test_sealed_entries_chain_in_order_and_verify(demo, api):
    entries = _sealed_record(demo, api)

    assert [entry.seq for entry in entries] == list(range(1, 7))
    assert entries[0].prev_hash == ""
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(entries))
    out = io.StringIO()
    call_command("audit", "verify", "--shop", "demo-shop", stdout=out)
    assert out.getvalue().strip() == "The record of demo-shop holds: 6 entries."


@pytest.mark.django_db
def test_an_entry_changed_in_sql_is_named_and_so_is_a_removed_one(demo, api):
    # given a sealed record, and the amount of its third entry changed behind the product
    entries = _sealed_record(demo, api)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {DecisionRecord._meta.db_table} SET justification = %s WHERE id = %s",
            ["approved after all", entries[2].pk],
        )

    # when it is verified, then the third entry is named
    with pytest.raises(CommandError) as broken:
        call_command("audit", "verify", "--shop", "demo-shop", stdout=io.StringIO())
    assert str(broken.value) == (
        f"The record of demo-shop is broken at entry 3 (id {entries[2].pk}): its content was "
        "changed after it was sealed (its hash differs). 2 entries before it hold."
    )

    # and with the fifth entry deleted instead, the chain says where it jumps
    DecisionRecord.objects.filter(pk=entries[2].pk).update(justification=entries[2].justification)
    DecisionRecord.objects.filter(pk=entries[4].pk).delete()
    report = chain_verify(merchant_id=demo.pk)
    assert (report.broken_seq, report.reason) == (6, "entry 5 is missing: the chain goes on at 6")


@pytest.mark.django_db(transaction=True)
def test_two_sealers_at_once_seal_each_entry_once(demo, api):
    # given 8 unsealed entries
    for _ in range(4):
        waiting = refund_run_waiting()
        decide(api("sam"), waiting.approval, "reject", reason="no")

    # when two sealers run at once
    sealed = in_threads([lambda: chain_seal(merchant_id=demo.pk)] * 2)

    # then every entry was sealed by one of them, and the chain holds
    assert sorted(sealed) == [0, 8]
    assert chain_verify(merchant_id=demo.pk).intact
    assert RecordChain.objects.get(merchant=demo).last_seq == 8


@pytest.mark.django_db
def test_an_archive_writes_then_deletes_the_oldest_and_the_rest_still_verifies(demo, api, tmp_path):
    # given 6 entries sealed three days ago, and 2 recorded now
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        _sealed_record(demo, api)
    waiting = refund_run_waiting()
    decide(api("sam"), waiting.approval, "reject", reason="no")

    # when the entries before yesterday are archived
    path = tmp_path / "old.jsonl"
    day = (timezone.now() - timedelta(days=1)).date().isoformat()
    out = io.StringIO()
    call_command(
        "audit", "archive", "--shop", "demo-shop", "--before", day, "--to", str(path), stdout=out
    )

    # then the six are in the file, gone from the table, and the chain verifies from the 7th
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert out.getvalue().strip() == f"Archived 6 entries of demo-shop to {path}."
    kept = DecisionRecord.objects.filter(merchant=demo).order_by("seq")
    assert list(kept.values_list("seq", flat=True)) == [7, 8]
    assert chain_verify(merchant_id=demo.pk).intact


@pytest.mark.django_db
def test_prune_leaves_the_record_alone(demo, api):
    # given a finished run, long ago, with its record
    with time_machine.travel(timezone.now() - timedelta(days=200)):
        waiting = refund_run_waiting()
        decide(api("sam"), waiting.approval, "reject", reason="no")
        worker.tick()

    # when runs finished 90 days ago are pruned
    call_command("prune", "--older-than", "90d", stdout=io.StringIO())

    # then the run's events are gone and its record stays
    assert not RunEvent.objects.filter(run=waiting.run).exists()
    assert [step[0] for step in steps(waiting.approval)] == ["requested", "rejected"]
