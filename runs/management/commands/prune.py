"""`manage.py prune --older-than 90d`: forget the records of runs that finished long ago."""

import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runs.services.retention import runs_prune_batch

UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def age(text: str) -> timedelta:
    """`90d`, `12h` or `30m` as a duration."""
    found = re.fullmatch(r"([1-9][0-9]{0,5})([dhm])", text.strip())
    if found is None:
        raise CommandError(
            f"--older-than takes a number and a unit, like 90d, 12h or 30m; not {text!r}."
        )
    return timedelta(**{UNITS[found[2]]: int(found[1])})


class Command(BaseCommand):
    help = (
        "Delete the events, model attempts and input receipts of runs that finished before the "
        "given age (input receipts, which hold idempotency keys, once a day old at least); the "
        "runs and what a domain recorded about them are kept. Safe to run again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", required=True, help="An age: 90d, 12h or 30m.")
        parser.add_argument("--batch-size", type=int, default=500)

    def handle(self, *args, older_than, batch_size, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        cutoff = timezone.now() - age(older_than)
        totals = {"runs": 0, "events": 0, "attempts": 0, "inputs": 0}
        resume_after = None
        while True:
            batch = runs_prune_batch(
                finished_before=cutoff, resume_after=resume_after, batch_size=batch_size
            )
            for name in totals:
                totals[name] += getattr(batch, name)
            if batch.runs:
                self.stdout.write(f"  {totals['runs']} runs looked at so far ...")
            resume_after = batch.resume_after
            if resume_after is None:
                break
        self.stdout.write(
            f"Deleted {totals['events']} events, {totals['attempts']} model attempts and "
            f"{totals['inputs']} input receipts of the {totals['runs']} runs that finished "
            f"before {cutoff:%Y-%m-%d %H:%M} UTC (input receipts younger than 24 hours are "
            "kept: their idempotency keys may still be retried)."
        )
