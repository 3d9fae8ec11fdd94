from django.db import migrations, models


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
    ]
