"""A run's wait state keeps what its wait kind adds in `payload`, validated by the model that
kind registers, instead of beside the runtime's own fields."""

from django.db import migrations

CORE = ("interrupt_id", "kind", "tool_name", "tool_key", "tool_args")


def nest(apps, schema_editor):
    AgentRun = apps.get_model("runs", "AgentRun")
    for run in AgentRun.objects.filter(wait_state__isnull=False).only("pk", "wait_state").iterator():
        state = run.wait_state
        if not isinstance(state, dict) or "payload" in state:
            continue
        payload = {k: v for k, v in state.items() if k not in CORE and v is not None}
        nested = {**{k: state[k] for k in CORE if k in state}, "payload": payload}
        AgentRun.objects.filter(pk=run.pk).update(wait_state=nested)


def flatten(apps, schema_editor):
    AgentRun = apps.get_model("runs", "AgentRun")
    for run in AgentRun.objects.filter(wait_state__isnull=False).only("pk", "wait_state").iterator():
        state = run.wait_state
        if not isinstance(state, dict) or not isinstance(state.get("payload"), dict):
            continue
        flat = {k: v for k, v in state.items() if k != "payload"}
        AgentRun.objects.filter(pk=run.pk).update(wait_state={**flat, **state["payload"]})


class Migration(migrations.Migration):
    dependencies = [("runs", "0005_input_keys_per_principal")]

    operations = [migrations.RunPython(nest, flatten)]
