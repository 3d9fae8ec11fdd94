"""Django's wiring. Every value comes from the environment, read through agentportal.env (each
variable named in the error when its value does not fit): Django's own here, each app's in its
conf module (see the README, Environment variables)."""

from pathlib import Path

import dj_database_url
from csp import constants as csp_constants
from django.core.exceptions import ImproperlyConfigured

from agentportal.conf import portal_settings
from agentportal.env import (
    env_bool,
    env_choice,
    env_count,
    env_float,
    env_int,
    env_list,
    env_redis_url,
    env_text,
)
from agentportal.secret_key import secret_key_checked
from approvals.conf import approvals_settings
from runs.conf import runs_settings

BASE_DIR = Path(__file__).resolve().parent.parent


DEBUG = env_bool("DJANGO_DEBUG")

# The demo's own random key (made once by `make demo`, git-ignored), read only with DEBUG on.
DEMO_SECRET_KEY_FILE = Path(
    env_text("AGENTPORTAL_DEMO_SECRET_KEY_FILE", "") or BASE_DIR / ".demo-secret-key"
)
SECRET_KEY = secret_key_checked(
    given=env_text("DJANGO_SECRET_KEY", ""), debug=DEBUG, demo_file=DEMO_SECRET_KEY_FILE
)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "django_htmx",
    "csp",
    "agentportal",
    "runs",
    "approvals",
]

# Behind a TLS-terminating proxy (AGENTPORTAL_HTTPS=1): trust its X-Forwarded-Proto, send
# plain http to https, ask browsers to keep to https, and send cookies over https only.
HTTPS = env_bool("AGENTPORTAL_HTTPS")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    # The proxy's health checks may come over plain http.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env_int("AGENTPORTAL_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("AGENTPORTAL_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("AGENTPORTAL_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# No inline or foreign script runs on a page; styles may be inline (the layout's own, and the
# indicator styles htmx adds). The API docs page (Swagger UI) starts itself with an inline
# script, so it is left out.
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/api/v1/docs/"],
    "DIRECTIVES": {
        "default-src": [csp_constants.SELF],
        "script-src": [csp_constants.SELF],
        "style-src": [csp_constants.SELF, csp_constants.UNSAFE_INLINE],
        "img-src": [csp_constants.SELF, "data:"],
        "connect-src": [csp_constants.SELF],
        "form-action": [csp_constants.SELF],
        "frame-ancestors": [csp_constants.NONE],
        "base-uri": [csp_constants.SELF],
        "object-src": [csp_constants.NONE],
    },
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "agentportal.middleware.HostileInputMiddleware",
    "agentportal.middleware.DatabaseAwayMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "agentportal.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "agentportal.wsgi.application"

# SQLite is the embedded default. IMMEDIATE makes every atomic() take the write lock at BEGIN,
# so concurrent writers queue on the busy timeout instead of failing with "database is locked".
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
    ),
}

# The web server (ASGI) answers each request in a thread of its own, which a connection kept
# past the request would outlive: its processes take connections from a pool (PostgreSQL) or
# open one per request (SQLite, a file). Workers keep theirs (one thread each).
WEB_PROCESS = env_bool("AGENTPORTAL_WEB_PROCESS", False)
try:
    DATABASES = {
        "default": dj_database_url.parse(
            env_text("DATABASE_URL", "") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
            conn_max_age=0 if WEB_PROCESS else 60,
            conn_health_checks=not WEB_PROCESS,
        )
    }
except ValueError as error:  # the library's errors for a scheme or a URL it cannot read
    raise ImproperlyConfigured(
        "DATABASE_URL cannot be read (use postgres://user:password@host:port/name or "
        f"sqlite:///path): {str(error).split('. ')[0].rstrip('.')}."
    ) from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {**SQLITE_OPTIONS, **DATABASES["default"].get("OPTIONS", {})}
    # Tests run the worker cluster in other processes, so the test database must be a file.
    DATABASES["default"]["TEST"] = {
        "NAME": env_text("AGENTPORTAL_TEST_SQLITE", str(BASE_DIR / "test.sqlite3"))
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
    "AGENTPORTAL_PG_PREPARED_STATEMENTS", True
):
    # Server-side binding lets psycopg prepare a statement once it was run five times on a
    # connection; the worker's few statements then skip parsing and planning, which halved
    # the database's CPU per run (measured with the plain benchmark). A pooler in
    # transaction mode may not keep them: turn them off there.
    DATABASES["default"]["OPTIONS"] = {
        "server_side_binding": True,
        "prepare_threshold": 5,
        **DATABASES["default"].get("OPTIONS", {}),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # PostgreSQL's JIT compiled the claim's statement once its table held a million runs
    # (its cost estimate crossed jit_above_cost), and the claim took 4.3x as long as at 100k
    # (`bench --scenario scale`). The statements here are short: they never gain from it. Any
    # -c options the URL gives come after, and win. (A pooler that drops the startup
    # `options`, as PgBouncer is told to, leaves the server's setting.)
    given = DATABASES["default"].get("OPTIONS", {}).get("options", "")
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "options": f"-c jit=off {given}".strip(),
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and WEB_PROCESS:
    WEB_DB_POOL = env_count("AGENTPORTAL_WEB_DB_POOL", 20)
    DATABASES["default"]["OPTIONS"] = {
        # A request waits at most 3 s for a connection (the database away, or every one in
        # use), then is answered 503 with Retry-After.
        "pool": {"min_size": min(2, WEB_DB_POOL), "max_size": WEB_DB_POOL, "timeout": 3},
        **DATABASES["default"].get("OPTIONS", {}),
    }

# One cache every web node shares: the rate limits and sign-in attempts count in it, event
# streams hold their slots and pages their viewers there. Redis when AGENTPORTAL_CACHE_URL
# names one (each count one increment there, off the database), else the database's table.
CACHE_URL = env_redis_url("AGENTPORTAL_CACHE_URL")
if CACHE_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "agentportal_cache",
            # Past MAX_ENTRIES the cache drops a third of its rows, live ones too: open streams'
            # slots and rate-limit counts would be forgotten. `maintain` deletes the expired rows
            # instead, so the table holds what is live.
            "OPTIONS": {"MAX_ENTRIES": 1_000_000},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's, but the password is hashed without a database connection held (agentportal.backends).
AUTHENTICATION_BACKENDS = ["agentportal.backends.PasswordBackend"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/portal/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Only for collectstatic; the demo and tests serve from the apps through WhiteNoise finders.
STATIC_ROOT = env_text("DJANGO_STATIC_ROOT", "") or None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the apps' folders, so the demo needs no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

EMAIL_BACKEND = env_text("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_text("DJANGO_DEFAULT_FROM_EMAIL", "agentportal@localhost")
EMAIL_TIMEOUT = 10

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Integrations only: the pages have their own views on the session.
        "agentportal.auth.ApiKeyAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agentportal.parsers.LimitedJSONParser"],
    "EXCEPTION_HANDLER": "agentportal.problems.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["agentportal.throttles.ApiKeyRateThrottle"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "agentportal.negotiation.JSONFallbackNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Portal API",
    "DESCRIPTION": "Durable agent runs with human approvals.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agentportal.schema.problems_declared",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ToolCallDecisionEnum": "approvals.models.Decision.choices",
        "PlanDecisionEnum": "approvals.models.PlanDecision.choices",
        # The one decision each shape of a decision body names.
        "ApproveEnum": ["approve"],
        "ReviseEnum": ["revise"],
        "RejectEnum": ["reject"],
    },
}

# django-q2. These numbers were measured, not guessed (DESIGN sections 2 and 5): timeout above
# the worker slice, retry above timeout, no success rows (one write fewer per task).
Q_CLUSTER = {
    "name": "agentportal",
    "orm": "default",
    "workers": env_count("AGENTPORTAL_WORKERS", 2),
    "timeout": 150,
    "retry": 180,
    "ack_failures": True,
    "max_attempts": 2,
    "save_limit": -1,
    "catch_up": False,
    "poll": env_float("AGENTPORTAL_Q_POLL", 0.05),
    "label": "Django Q2",
}
# The broker carries only wake-ups (a tick drains every claimable run), so one that loses a
# message costs latency, never a run: `maintain` wakes the workers every minute regardless.
# The database is the default broker; Redis takes that load off it when many nodes poll.
BROKER_URL = env_redis_url("AGENTPORTAL_BROKER_URL")
if BROKER_URL:
    del Q_CLUSTER["orm"]
    Q_CLUSTER["redis"] = BROKER_URL

# What the apps read, each from its own variables (agentportal.conf, runs.conf,
# approvals.conf); the code reads settings.AGENTPORTAL, which tests may override.
AGENTPORTAL = {
    **portal_settings(),
    **runs_settings(task_timeout=Q_CLUSTER["timeout"], task_retry=Q_CLUSTER["retry"]),
    **approvals_settings(),
}

LOG_FORMAT = env_choice("AGENTPORTAL_LOG_FORMAT", "plain", ("plain", "json"))
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "agentportal.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT},
    },
    "root": {
        "handlers": ["console"],
        "level": env_choice("AGENTPORTAL_LOG_LEVEL", "INFO", LOG_LEVELS),
    },
    "loggers": {
        "django.server": {"level": "WARNING"},
        "django-q": {"level": env_choice("AGENTPORTAL_Q_LOG_LEVEL", "WARNING", LOG_LEVELS)},
        # The HTTP client logs every model call at INFO: a line per call, hundreds a second.
        # The runtime records each call as a ModelAttempt instead.
        "httpx2": {"level": "WARNING"},
        "httpcore2": {"level": "WARNING"},
    },
}
