"""A shop's decision record as a hash chain. Entries are written unchained, in the
transactions of the steps they record; `chain_seal` then gives each, oldest first, its place
(`seq`) and the hash of its content with the hash of the entry before it. Changing, removing or
reordering a sealed entry breaks the chain at that entry, which `chain_verify` names. An
archive takes the oldest entries away and keeps the last one's seq and hash on the chain, so
what remains verifies from there.

Sealing and archiving hold the chain row's lock alone (approvals.locks.record_chain_lock);
`maintain` seals every minute, and export and verify seal first."""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from approvals.locks import record_chain_lock
from approvals.models import DecisionRecord, RecordChain

SEAL_BATCH = 1000


def entry_content(entry: DecisionRecord) -> dict[str, Any]:
    """What an entry says, as exported and as hashed (with the hash of the one before)."""
    return {
        "seq": entry.seq,
        "at": entry.at.astimezone(UTC).isoformat(),
        "kind": entry.kind,
        "run_id": str(entry.run_id),
        "interrupt_id": entry.interrupt_id,
        "tool_name": entry.tool_name,
        "arguments": entry.arguments,
        "args_digest": entry.args_digest,
        "seen_digest": entry.seen_digest or None,
        "actor_kind": entry.actor_kind,
        "actor": entry.actor,
        "via": entry.via or None,
        "justification": entry.justification or None,
        "prev_hash": entry.prev_hash,
    }


def entry_hash(entry: DecisionRecord) -> str:
    content = {**entry_content(entry), "shop": entry.merchant_id}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def chain_seal(*, merchant_id: int) -> int:
    """Chain the shop's unsealed entries, oldest first, SEAL_BATCH at most; how many. Two
    sealers at once take turns on the chain's lock: the second seals what is left, if any."""
    RecordChain.objects.get_or_create(merchant_id=merchant_id)
    with transaction.atomic():
        chain = record_chain_lock(merchant_id)
        entries = list(
            DecisionRecord.objects.filter(merchant_id=merchant_id, seq__isnull=True).order_by("id")[
                :SEAL_BATCH
            ]
        )
        seq, previous = chain.last_seq, chain.last_hash
        for entry in entries:
            seq += 1
            entry.seq, entry.prev_hash = seq, previous
            entry.hash = previous = entry_hash(entry)
        DecisionRecord.objects.bulk_update(entries, ["seq", "prev_hash", "hash"])
        moved = RecordChain.objects.filter(pk=chain.pk, last_seq=chain.last_seq).update(
            last_seq=seq, last_hash=previous
        )
        if moved != 1:
            raise transaction.TransactionManagementError("record chain changed under its lock")
    return len(entries)


def chain_seal_all(*, merchant_id: int) -> int:
    sealed = total = chain_seal(merchant_id=merchant_id)
    while sealed == SEAL_BATCH:
        sealed = chain_seal(merchant_id=merchant_id)
        total += sealed
    return total


def records_seal_due() -> int:
    """`maintain`'s sweep: chain every shop's unsealed entries."""
    shops = (
        DecisionRecord.objects.filter(seq__isnull=True)
        .values_list("merchant_id", flat=True)
        .distinct()
    )
    return sum(chain_seal_all(merchant_id=shop) for shop in list(shops))


@dataclass
class ChainReport:
    checked: int = 0
    broken_seq: int | None = None
    broken_id: int | None = None
    reason: str = ""

    @property
    def intact(self) -> bool:
        return self.broken_seq is None


def chain_verify(*, merchant_id: int) -> ChainReport:
    """Recompute the shop's chain from its start (or the last archive) and name the first
    entry that breaks it, and why."""
    chain_seal_all(merchant_id=merchant_id)
    chain = RecordChain.objects.get(merchant_id=merchant_id)
    report = ChainReport()
    seq, previous = chain.archived_seq, chain.archived_hash
    for entry in _sealed(merchant_id):
        seq += 1
        reason = ""
        if entry.seq != seq:
            reason = f"entry {seq} is missing: the chain goes on at {entry.seq}"
        elif entry.prev_hash != previous:
            reason = "it does not follow the entry before it (its prev_hash differs)"
        elif entry_hash(entry) != entry.hash:
            reason = "its content was changed after it was sealed (its hash differs)"
        if reason:
            report.broken_seq, report.broken_id, report.reason = entry.seq, entry.pk, reason
            return report
        report.checked += 1
        previous = entry.hash
    if (seq, previous) != (chain.last_seq, chain.last_hash):
        report.broken_seq = seq + 1
        report.reason = f"the chain ends at {seq}, but it was sealed up to {chain.last_seq}"
    return report


def _sealed(merchant_id: int, **filters) -> Iterator[DecisionRecord]:
    return (
        DecisionRecord.objects.filter(merchant_id=merchant_id, seq__isnull=False, **filters)
        .order_by("seq")
        .iterator(chunk_size=2000)
    )


def chain_archive(*, merchant_id: int, before: datetime, write) -> int:
    """Archive the shop's oldest entries, those of the chain's start recorded before `before`:
    `write` each one's JSON line (the same as the export's), then delete them, keeping the
    last one's seq and hash on the chain so the rest still verifies. How many."""
    chain_seal_all(merchant_id=merchant_id)
    last_seq, last_hash, count = None, "", 0
    for entry in _sealed(merchant_id):
        if entry.at >= before:
            break
        write(json.dumps({**entry_content(entry), "hash": entry.hash}) + "\n")
        last_seq, last_hash, count = entry.seq, entry.hash, count + 1
    if last_seq is None:
        return 0
    with transaction.atomic():
        chain = record_chain_lock(merchant_id)
        if chain.archived_seq >= last_seq:
            return 0  # another archive took them meanwhile
        DecisionRecord.objects.filter(merchant_id=merchant_id, seq__lte=last_seq).delete()
        moved = RecordChain.objects.filter(pk=chain.pk, archived_seq=chain.archived_seq).update(
            archived_seq=last_seq, archived_hash=last_hash
        )
        if moved != 1:
            raise transaction.TransactionManagementError("record chain changed under its lock")
    return count
