"""`manage.py audit verify --shop demo-shop`: recompute a shop's decision record and name the
first entry that breaks its chain. `manage.py audit archive --shop demo-shop --before
2026-01-01 --to old.jsonl`: write the entries recorded before that day to the file, then delete
them; the rest still verifies."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from agentportal.models import Merchant
from approvals.audit.chain import chain_archive, chain_verify


class Command(BaseCommand):
    help = "Verify or archive a shop's decision record."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        verify = actions.add_parser("verify", help="Recompute the chain; name the first break.")
        verify.add_argument("--shop", required=True, help="The shop's slug.")
        archive = actions.add_parser("archive", help="Export, then delete, the oldest entries.")
        archive.add_argument("--shop", required=True, help="The shop's slug.")
        archive.add_argument("--before", required=True, help="A day, YYYY-MM-DD (UTC).")
        archive.add_argument("--to", required=True, help="The JSON Lines file to write.")

    def handle(self, *args, action, shop, **options):
        merchant = Merchant.objects.filter(slug=shop).first()
        if merchant is None:
            raise CommandError(f"No shop {shop!r}.")
        if action == "verify":
            self._verify(merchant)
        else:
            self._archive(merchant, options["before"], options["to"])

    def _verify(self, merchant: Merchant) -> None:
        report = chain_verify(merchant_id=merchant.pk)
        if not report.intact:
            raise CommandError(
                f"The record of {merchant.slug} is broken at entry {report.broken_seq}"
                f" (id {report.broken_id}): {report.reason}. {report.checked} entries before"
                " it hold."
            )
        self.stdout.write(f"The record of {merchant.slug} holds: {report.checked} entries.")

    def _archive(self, merchant: Merchant, before: str, path: str) -> None:
        try:
            day = datetime.strptime(before, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise CommandError(f"--before takes a day, YYYY-MM-DD, not {before!r}.") from None
        try:
            with open(path, "x", encoding="utf-8") as out:
                count = chain_archive(merchant_id=merchant.pk, before=day, write=out.write)
        except FileExistsError:
            raise CommandError(f"{path} exists already: name a new file.") from None
        self.stdout.write(f"Archived {count} entries of {merchant.slug} to {path}.")
