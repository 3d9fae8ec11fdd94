"""A setting that does not fit stops the process at start with one sentence naming the
variable and what it takes; one that fits is read as its type."""

import secrets

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentportal.env import env_bool, env_choice, env_count, env_float, env_int, env_redis_url
from agentportal.models import Merchant
from tests.product import manage

NAME = "AGENTPORTAL_TEST_VALUE"


@pytest.mark.parametrize(
    ("reader", "raw", "wanted"),
    [
        (lambda: env_int(NAME, 1), "two", "a whole number of 0 or more"),
        (lambda: env_int(NAME, 1), "-3", "a whole number of 0 or more"),
        (lambda: env_int(NAME, 1), "1.5", "a whole number of 0 or more"),
        (lambda: env_count(NAME, 1), "0", "a whole number of 1 or more"),
        (lambda: env_count(NAME, 1), "٣", "a whole number of 1 or more"),
        (lambda: env_float(NAME, 1.0), "soon", "a number above 0"),
        (lambda: env_float(NAME, 1.0), "0", "a number above 0"),
        (lambda: env_float(NAME, 1.0), "nan", "a number above 0"),
        (lambda: env_float(NAME, 1.0, positive=False), "-1", "a number of 0 or more"),
        (lambda: env_bool(NAME), "maybe", "1, true, yes or on (or 0, false, no, off)"),
        (lambda: env_choice(NAME, "a", ("a", "b")), "c", "a or b"),
        (lambda: env_redis_url(NAME), "http://cache", "a redis:// or rediss:// URL"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_naming_the_variable(monkeypatch, reader, raw, wanted):
    monkeypatch.setenv(NAME, raw)

    with pytest.raises(ImproperlyConfigured) as refused:
        reader()

    assert str(refused.value) == f"{NAME} must be {wanted}, not {raw!r}."


@pytest.mark.parametrize(
    ("reader", "raw", "value"),
    [
        (lambda: env_int(NAME, 1), " 0 ", 0),
        (lambda: env_count(NAME, 1), "12", 12),
        (lambda: env_float(NAME, 1.0), "0.25", 0.25),
        (lambda: env_float(NAME, 1.0, positive=False), "0", 0.0),
        (lambda: env_bool(NAME, True), "off", False),
        (lambda: env_bool(NAME), "Yes", True),
        (lambda: env_redis_url(NAME), "rediss://cache:6380/0", "rediss://cache:6380/0"),
    ],
)
def test_a_value_that_fits_is_read_as_its_type(monkeypatch, reader, raw, value):
    monkeypatch.setenv(NAME, raw)

    assert reader() == value


def test_unset_variables_take_their_defaults(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)

    assert (env_int(NAME, 7), env_float(NAME, 0.5), env_bool(NAME, True)) == (7, 0.5, True)
    assert env_redis_url(NAME) == ""


@pytest.mark.parametrize(
    ("variable", "raw", "sentence"),
    [
        (
            "AGENTPORTAL_WORKERS",
            "two",
            "AGENTPORTAL_WORKERS must be a whole number of 1 or more, not 'two'.",
        ),
        (
            "AGENTPORTAL_LEASE_SECONDS",
            "2m",
            "AGENTPORTAL_LEASE_SECONDS must be a number above 0, not '2m'.",
        ),
        (
            "AGENTPORTAL_TICK_BUDGET_SECONDS",
            "140",
            "AGENTPORTAL_TICK_BUDGET_SECONDS (140) plus AGENTPORTAL_TOOL_TIMEOUT_SECONDS (30)"
            " must stay under the worker task's timeout (150 s): a step in flight when the"
            " budget ends must finish before the task is stopped.",
        ),
        (
            "AGENTPORTAL_SLICE_SECONDS",
            "150",
            "AGENTPORTAL_SLICE_SECONDS (150) must stay under the worker task's timeout (150 s):"
            " a slice ends before its task is stopped.",
        ),
        (
            "AGENTPORTAL_LOG_LEVEL",
            "loud",
            "AGENTPORTAL_LOG_LEVEL must be DEBUG or INFO or WARNING or ERROR or CRITICAL,"
            " not 'loud'.",
        ),
    ],
)
def test_the_product_refuses_to_start_with_a_setting_that_does_not_fit(variable, raw, sentence):
    started = manage("check", DJANGO_SECRET_KEY=secrets.token_urlsafe(50), **{variable: raw})

    assert started.returncode != 0
    assert started.stderr.strip() == f"agentportal: {sentence}"


@pytest.mark.django_db
def test_a_new_shop_takes_the_configured_running_run_capacity(settings):
    # given a portal configured for 3 running runs a shop (AGENTPORTAL_MAX_RUNNING_RUNS)
    settings.AGENTPORTAL = {**settings.AGENTPORTAL, "DEFAULT_MAX_RUNNING_RUNS": 3}

    # when a shop is made without naming its capacity, and one naming it
    default = Merchant.objects.create(slug="corner", name="Corner shop")
    named = Merchant.objects.create(slug="big", name="Big shop", max_running_runs=40)

    # then the first has the configured capacity, the second its own
    default.refresh_from_db()
    assert (default.max_running_runs, named.max_running_runs) == (3, 40)
