from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from agentportal.models import ApiKeyRole, Merchant
from agentportal.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key and print it alone on the last line (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("--merchant", required=True, help="The merchant's slug.")
        parser.add_argument("--role", required=True, choices=ApiKeyRole.values)
        parser.add_argument("--user", help="The username the key acts as (not for service keys).")

    def handle(self, *args, merchant, role, user=None, **options):
        shop = Merchant.objects.filter(slug=merchant).first()
        if shop is None:
            raise CommandError(f"no merchant {merchant!r}")
        account = None
        if user:
            account = User.objects.filter(username=user).first()
            if account is None:
                raise CommandError(f"no user {user!r}")
        try:
            key, raw_key = api_key_create(merchant=shop, role=role, user=account)
        except ValueError as error:
            raise CommandError(str(error)) from error
        self.stderr.write(
            f"{role} key {key.prefix} for {shop.slug}" + (f" as {user}" if user else "")
        )
        self.stdout.write(raw_key)
