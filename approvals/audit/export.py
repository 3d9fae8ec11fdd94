"""The decision record read out: JSON Lines for integrations (a page at a time, after a seq),
CSV for operators. Both stream: a shop's whole record goes out in bounded memory. A CSV cell
a spreadsheet would run as a formula (starting with = + - @, a tab or a carriage return) is
written with a leading quote, so it reads as text."""

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime

from django.db.models import QuerySet

from approvals.audit.chain import chain_seal_all, entry_content
from approvals.models import DecisionRecord

CSV_COLUMNS = [
    "seq",
    "at",
    "kind",
    "tool_name",
    "interrupt_id",
    "run_id",
    "actor_kind",
    "actor",
    "via",
    "arguments",
    "args_digest",
    "seen_digest",
    "justification",
    "prev_hash",
    "hash",
]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CHUNK = 2000


def records_of(
    *,
    merchant_id: int,
    since: datetime | None = None,
    until: datetime | None = None,
    after: int = 0,
) -> QuerySet[DecisionRecord]:
    """The shop's sealed entries in chain order, after seq `after`, recorded in [since,
    until); what was recorded until now is sealed first. Read them with
    `.iterator(chunk_size=CHUNK)`: a whole record stays out of memory."""
    chain_seal_all(merchant_id=merchant_id)
    entries = DecisionRecord.objects.filter(merchant_id=merchant_id, seq__gt=after)
    if since is not None:
        entries = entries.filter(at__gte=since)
    if until is not None:
        entries = entries.filter(at__lt=until)
    return entries.order_by("seq")


def record_line(entry: DecisionRecord) -> str:
    return json.dumps({**entry_content(entry), "hash": entry.hash}, ensure_ascii=False) + "\n"


def csv_lines(entries: QuerySet[DecisionRecord]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for entry in entries.iterator(chunk_size=CHUNK):
        content = {**entry_content(entry), "hash": entry.hash}
        content["arguments"] = json.dumps(content["arguments"], sort_keys=True)
        writer.writerow([csv_cell(content[column]) for column in CSV_COLUMNS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def csv_cell(value) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text
