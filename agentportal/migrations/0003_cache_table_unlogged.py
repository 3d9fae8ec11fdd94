"""On PostgreSQL the shared cache's table is UNLOGGED: its rows (rate-limit counts, stream
slots) are worth nothing after a crash, and a write to it then commits without waiting for the
disk. Each stream opened and each API call writes to it; the streams bench measured those
commits as most of a web process's time."""

from django.db import migrations

TABLE = "agentportal_cache"


def unlogged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(TABLE)} SET UNLOGGED")


def logged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(TABLE)} SET LOGGED")


class Migration(migrations.Migration):
    dependencies = [("agentportal", "0002_cache_table")]

    operations = [migrations.RunPython(unlogged, logged)]
