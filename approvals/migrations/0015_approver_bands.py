"""Approver bands: a policy version says how many people of which group a call needs by its
amount. The versions written with `two_approvers_from` get the one band it is the shorthand
of (two people of any group from that amount); versions are never edited otherwise, and the
gate reads only the bands from now on."""

from django.db import migrations, models


def _shorthand_bands(apps, schema_editor):
    Version = apps.get_model("approvals", "ApprovalPolicyVersion")
    for version in Version.objects.filter(two_approvers_from__isnull=False).iterator():
        version.approver_bands = [
            {"from": f"{version.two_approvers_from:.2f}", "approvals": 2, "group": None}
        ]
        version.save(update_fields=["approver_bands"])


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0014_absences"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="required_group",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="approvalpolicyversion",
            name="approver_bands",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(_shorthand_bands, migrations.RunPython.noop),
    ]
