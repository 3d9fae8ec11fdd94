"""compose.yaml stays in step with the product: every command it runs is a management command
that accepts those arguments, and every variable it sets is one the settings read."""

import re
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands, load_command_class

ROOT = Path(settings.BASE_DIR)
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
PORTAL_SERVICES = ["migrate", "web", "worker"]


# Django's settings, and each app's own (their conf modules).
SETTINGS_MODULES = [
    "agentportal/settings.py",
    "agentportal/conf.py",
    "runs/conf.py",
    "approvals/conf.py",
]


def _settings_source() -> str:
    return "\n".join((ROOT / module).read_text() for module in SETTINGS_MODULES)


@pytest.mark.parametrize("service", PORTAL_SERVICES)
def test_each_portal_service_runs_a_command_the_product_has_with_arguments_it_takes(service):
    command = COMPOSE["services"][service]["command"]
    assert command[:2] == ["python", "manage.py"]
    name, arguments = command[2], command[3:]
    assert name in get_commands(), f"{service} runs unknown command {name}"
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)

    parser.parse_args(arguments)  # exits on an argument the command does not take


@pytest.mark.parametrize("service", PORTAL_SERVICES)
def test_each_variable_a_portal_service_sets_is_one_the_settings_read(service):
    environment = COMPOSE["services"][service]["environment"]
    source = _settings_source()
    for variable in environment:
        assert re.search(rf"[\"']{variable}[\"']", source) or variable == "DATABASE_URL", (
            f"{service} sets {variable}, which no setting reads"
        )


def test_the_roles_share_the_database_and_the_broker_and_wait_for_the_migration():
    web, worker = COMPOSE["services"]["web"], COMPOSE["services"]["worker"]
    for variable in ("DATABASE_URL", "AGENTPORTAL_BROKER_URL", "DJANGO_SECRET_KEY"):
        assert web["environment"][variable] == worker["environment"][variable]
    for service in (web, worker):
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert web["environment"]["AGENTPORTAL_BROKER_URL"].startswith("redis://redis:")
