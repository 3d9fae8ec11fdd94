from django.db import migrations, models


def refusals_failed(apps, schema_editor):
    """Calls the tool refused were recorded as EXECUTED with a failed result: they become
    FAILED, and so does their entry in their run's snapshot, which never disagrees."""
    Approval = apps.get_model("approvals", "Approval")
    AgentRun = apps.get_model("runs", "AgentRun")
    refused = Approval.objects.filter(status="EXECUTED", result__status="failed")
    for approval in refused.iterator():
        approval.status = "FAILED"
        approval.save(update_fields=["status"])
        run = AgentRun.objects.get(pk=approval.run_id)
        snapshot = run.state_snapshot or {}
        calls = snapshot.get("pending_tool_calls") or [snapshot.get("pending_tool_call") or {}]
        for call in calls:
            if call.get("interrupt_id") == approval.interrupt_id and call["status"] == "EXECUTED":
                call["status"] = "FAILED"
                run.save(update_fields=["state_snapshot"])


class Migration(migrations.Migration):
    dependencies = [("approvals", "0008_approval_policies")]

    operations = [
        migrations.AlterField(
            model_name="approval",
            name="status",
            field=models.CharField(
                choices=[
                    ("PENDING_APPROVAL", "Pending Approval"),
                    ("APPROVED_EXECUTING", "Approved Executing"),
                    ("EXECUTED", "Executed"),
                    ("FAILED", "Failed: the tool refused"),
                    ("REJECTED", "Rejected"),
                    ("EXPIRED", "Expired"),
                    ("CANCELLED", "Cancelled"),
                ],
                default="PENDING_APPROVAL",
                max_length=20,
            ),
        ),
        migrations.RunPython(refusals_failed, migrations.RunPython.noop),
    ]
