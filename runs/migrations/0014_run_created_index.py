from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_attempt_abandoned"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="agentrun",
            index=models.Index(fields=["created_at", "id"], name="run_created_idx"),
        ),
    ]
