"""Secure by default: no known secret key, and TLS behind a proxy by one setting."""

import secrets

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from tests.product import manage

PRODUCTION = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "portal.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://portal.example.com",
    "AGENTPORTAL_HTTPS": "1",
}


@pytest.mark.parametrize("key", [None, "", "  "])
def test_without_a_secret_key_the_product_refuses_to_start_in_one_sentence(key):
    env = {} if key is None else {"DJANGO_SECRET_KEY": key}

    started = manage("check", **env)

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: DJANGO_SECRET_KEY is not set: set it to a long random secret "
        "(or run `make demo`, which makes one for the demo)."
    )


@pytest.mark.parametrize(
    "key",
    [
        "agentportal-insecure-development-key",
        "agentportal-debug-only-key",
        "tests-only-" + "x" * 50,
        "tests-only-" + secrets.token_urlsafe(20),
    ],
    ids=["development", "debug-fallback", "tests", "tests-pattern"],
)
def test_a_published_secret_key_is_refused_in_one_sentence(key):
    started = manage("check", **PRODUCTION | {"DJANGO_SECRET_KEY": key})

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: DJANGO_SECRET_KEY is a published key (the development, debug or tests' "
        "key) that anyone can sign with: set it to a long random secret."
    )


@pytest.fixture
def demo_key_file(tmp_path):
    """A `.demo-secret-key` as `make demo` leaves it in a checkout."""
    path = tmp_path / ".demo-secret-key"
    path.write_text(secrets.token_urlsafe(50) + "\n")
    return path


def test_with_debug_off_the_demos_key_file_is_not_read(demo_key_file):
    env = {**PRODUCTION, "AGENTPORTAL_DEMO_SECRET_KEY_FILE": str(demo_key_file)}
    del env["DJANGO_SECRET_KEY"]

    started = manage("check", **env)

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: DJANGO_SECRET_KEY is not set, and the demo's key (.demo-secret-key) is "
        "read only with DJANGO_DEBUG on, as `make demo` runs: set DJANGO_SECRET_KEY to a long "
        "random secret."
    )


def test_with_debug_off_the_demos_key_is_refused_even_when_given(demo_key_file):
    env = {
        **PRODUCTION,
        "AGENTPORTAL_DEMO_SECRET_KEY_FILE": str(demo_key_file),
        "DJANGO_SECRET_KEY": demo_key_file.read_text().strip(),
    }

    started = manage("check", **env)

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: DJANGO_SECRET_KEY is the demo's key (.demo-secret-key), which is for "
        "`make demo` with DJANGO_DEBUG on: set it to a long random secret."
    )


def test_the_demo_starts_with_debug_on_and_its_key_file(demo_key_file):
    printed = manage(
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(settings.DEBUG, settings.SECRET_KEY)",
        DJANGO_DEBUG="1",
        AGENTPORTAL_DEMO_SECRET_KEY_FILE=str(demo_key_file),
    )

    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.split() == ["True", demo_key_file.read_text().strip()]


@pytest.mark.parametrize("site_url", ["portal.example.com", "https://portal.example.com/portal"])
def test_a_site_url_that_is_not_an_address_is_refused_in_one_sentence(site_url):
    started = manage("check", **PRODUCTION, AGENTPORTAL_SITE_URL=site_url)

    assert started.returncode != 0
    assert started.stderr.strip() == (
        "agentportal: AGENTPORTAL_SITE_URL must be the portal's address, such as "
        "https://support.example.com (scheme and host, no path), not "
        f"{site_url!r}."
    )


def test_the_documented_production_environment_passes_the_deploy_checks():
    checked = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)

    assert checked.returncode == 0, checked.stderr
    assert "no issues" in checked.stdout


HTTPS_BEHIND_A_PROXY = {
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    "SECURE_SSL_REDIRECT": True,
    "SECURE_REDIRECT_EXEMPT": [r"^healthz$"],
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
    "CSRF_TRUSTED_ORIGINS": ["https://testserver"],
}


@pytest.mark.django_db
@override_settings(**HTTPS_BEHIND_A_PROXY)
def test_behind_a_tls_proxy_people_sign_in_and_plain_http_is_sent_to_https():
    User.objects.create_user("sam", password="a long password")
    browser = Client(enforce_csrf_checks=True)
    over_tls = {"HTTP_X_FORWARDED_PROTO": "https"}

    # plain http goes to https, but the proxy's health check does not
    assert browser.get("/portal/").status_code == 301
    assert browser.get("/healthz").status_code != 301

    # a sign-in through the proxy, with the browser's Origin, is accepted
    browser.get("/accounts/login/", **over_tls)
    token = browser.cookies["csrftoken"].value
    signed_in = browser.post(
        "/accounts/login/",
        {"username": "sam", "password": "a long password", "csrfmiddlewaretoken": token},
        HTTP_ORIGIN="https://testserver",
        **over_tls,
    )
    assert signed_in.status_code == 302, signed_in.content[:300]
    assert browser.cookies["sessionid"]["secure"]
