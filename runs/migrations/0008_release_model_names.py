"""A release's `model` is now validated: "default", "openai", "scripted" or "scripted:<name>".
Any other value used to play the scripted model, so it says so now."""

from django.db import migrations

KNOWN = ("default", "openai", "scripted")


def name_the_scripted_model(apps, schema_editor):
    AgentRelease = apps.get_model("runs", "AgentRelease")
    for release in AgentRelease.objects.only("pk", "manifest").iterator():
        manifest = release.manifest
        if not isinstance(manifest, dict) or "model" not in manifest:
            continue
        if manifest["model"] in KNOWN:
            continue
        AgentRelease.objects.filter(pk=release.pk).update(
            manifest={**manifest, "model": "scripted"}
        )


class Migration(migrations.Migration):
    dependencies = [("runs", "0007_domain_event_cursor")]

    operations = [migrations.RunPython(name_the_scripted_model, migrations.RunPython.noop)]
