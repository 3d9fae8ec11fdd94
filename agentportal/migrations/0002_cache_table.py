"""The database cache's table (settings.CACHES), so that `migrate` alone sets a machine up. Made
by name, also when AGENTPORTAL_CACHE_URL points the cache at Redis: a machine that later goes
back to the database's cache finds it there."""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    call_command("createcachetable", "agentportal_cache", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("agentportal", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
