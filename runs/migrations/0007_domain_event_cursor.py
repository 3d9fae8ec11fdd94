from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_wait_state_payload")]

    operations = [
        migrations.RenameField(
            model_name="agentrun", old_name="business_cursor", new_name="domain_event_cursor"
        )
    ]
