"""Settings, all from the environment (see API.md, Operations)."""

import os
from pathlib import Path

import dj_database_url
from csp import constants as csp_constants
from django.core.exceptions import ImproperlyConfigured

from agentportal.proxies import trusted_proxies_parse
from agentportal.secret_key import secret_key_checked

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_count(name: str, default: int) -> int:
    """A whole number of 1 or more from the environment; anything else stops the process at
    start with a sentence naming the variable."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not (raw.strip().isascii() and raw.strip().isdigit() and int(raw) >= 1):
        raise ImproperlyConfigured(f"{name} must be a whole number of 1 or more, not {raw!r}.")
    return int(raw)


DEBUG = env_bool("DJANGO_DEBUG")

# The demo's own random key (made once by `make demo`, git-ignored), read only with DEBUG on.
DEMO_SECRET_KEY_FILE = Path(
    os.environ.get("AGENTPORTAL_DEMO_SECRET_KEY_FILE") or BASE_DIR / ".demo-secret-key"
)
SECRET_KEY = secret_key_checked(
    given=os.environ.get("DJANGO_SECRET_KEY", ""), debug=DEBUG, demo_file=DEMO_SECRET_KEY_FILE
)
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
    if host.strip()
]

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
CSRF_TRUSTED_ORIGINS = [
    origin.strip()
    for origin in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",")
    if origin.strip()
]
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
        "default": dj_database_url.config(
            default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
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
        "NAME": os.environ.get("AGENTPORTAL_TEST_SQLITE", str(BASE_DIR / "test.sqlite3"))
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
CACHE_URL = os.environ.get("AGENTPORTAL_CACHE_URL", "")
if CACHE_URL:
    if not CACHE_URL.startswith(("redis://", "rediss://")):
        raise ImproperlyConfigured(
            f"AGENTPORTAL_CACHE_URL must be a redis:// or rediss:// URL, not {CACHE_URL!r}."
        )
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
STATIC_ROOT = os.environ.get("DJANGO_STATIC_ROOT") or None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the apps' folders, so the demo needs no collectstatic step.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "agentportal@localhost")
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
    "workers": env_int("AGENTPORTAL_WORKERS", 2),
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
BROKER_URL = os.environ.get("AGENTPORTAL_BROKER_URL", "")
if BROKER_URL:
    if not BROKER_URL.startswith(("redis://", "rediss://")):
        raise ImproperlyConfigured(
            f"AGENTPORTAL_BROKER_URL must be a redis:// or rediss:// URL, not {BROKER_URL!r}."
        )
    del Q_CLUSTER["orm"]
    Q_CLUSTER["redis"] = BROKER_URL

# Agent runtime defaults (DESIGN section 9); a merchant's release may narrow them.
WORKER_IN_FLIGHT = env_count("AGENTPORTAL_WORKER_IN_FLIGHT", 256)
# Processes of the web server (each serves many requests and event streams at once).
WEB_PROCESSES = env_count("AGENTPORTAL_WEB_PROCESSES", 2)

# Where people reach the portal, for the links in emails (a mail client cannot follow a
# relative one).
SITE_URL = os.environ.get("AGENTPORTAL_SITE_URL", "http://127.0.0.1:8000").strip().rstrip("/")
if not SITE_URL.startswith(("http://", "https://")) or "/" in SITE_URL.split("://", 1)[1]:
    raise ImproperlyConfigured(
        "AGENTPORTAL_SITE_URL must be the portal's address, such as https://support.example.com"
        f" (scheme and host, no path), not {SITE_URL!r}."
    )
AGENTPORTAL = {
    "SITE_URL": SITE_URL,
    "MODEL": os.environ.get("AGENTPORTAL_MODEL", "scripted"),
    "OPENAI_BASE_URL": os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
    "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "not-needed"),
    "OPENAI_MODEL": os.environ.get("AGENTPORTAL_OPENAI_MODEL", "gpt-4o-mini"),
    "OPENAI_TIMEOUT_SECONDS": env_float("AGENTPORTAL_OPENAI_TIMEOUT_SECONDS", 30.0),
    "MODEL_ATTEMPTS_PER_STEP": env_int("AGENTPORTAL_MODEL_ATTEMPTS_PER_STEP", 2),
    "APPROVAL_TTL_SECONDS": env_int("AGENTPORTAL_APPROVAL_TTL_SECONDS", 1800),
    # The scripted model writes its answers a word at a time, this many ms apart (0: at once).
    "SCRIPTED_STREAM_MS": env_int("AGENTPORTAL_SCRIPTED_STREAM_MS", 20),
    # Publish the answers' text as the model writes it (runs.deltas); false: the clients still
    # stream from the model, but nothing is published and the answer shows when it commits.
    "STREAM_DELTAS": env_bool("AGENTPORTAL_STREAM_DELTAS", True),
    # Webhooks to http:// and to loopback or private addresses (a local test receiver).
    "WEBHOOK_ALLOW_PRIVATE": env_bool("AGENTPORTAL_WEBHOOK_ALLOW_PRIVATE"),
    "STOCK_LATENCY_SECONDS": env_float("AGENTPORTAL_STOCK_LATENCY_SECONDS", 3.0),
    # The proxies (addresses or networks) that may say who the client is in X-Forwarded-For,
    # to the web server and to Django alike; none by default, so every such header is ignored.
    "TRUSTED_PROXIES": trusted_proxies_parse(os.environ.get("AGENTPORTAL_TRUSTED_PROXIES", "")),
    # Failed sign-ins per user name and address before that pair waits out the window.
    "LOGIN_FAILURES": env_int("AGENTPORTAL_LOGIN_FAILURES", 5),
    "LOGIN_LOCK_SECONDS": env_int("AGENTPORTAL_LOGIN_LOCK_SECONDS", 15 * 60),
    # Failed sign-ins per user name from any address before the name waits out its window.
    "LOGIN_FAILURES_PER_NAME": env_int("AGENTPORTAL_LOGIN_FAILURES_PER_NAME", 20),
    "LOGIN_NAME_LOCK_SECONDS": env_int("AGENTPORTAL_LOGIN_NAME_LOCK_SECONDS", 3600),
    # Requests per API key (per address without one), and wrong keys per address a minute.
    "API_RATE": os.environ.get("AGENTPORTAL_API_RATE", "600/minute"),
    "AUTH_FAILURES_PER_MINUTE": env_int("AGENTPORTAL_AUTH_FAILURES_PER_MINUTE", 20),
    # How customers see whoever of the shop's staff decided (never their login name).
    "STAFF_DISPLAY_NAME": os.environ.get("AGENTPORTAL_STAFF_DISPLAY_NAME", "a supervisor"),
    # How long a blocking tool call may take before it is abandoned (a tool may declare less).
    "TOOL_TIMEOUT_SECONDS": env_float("AGENTPORTAL_TOOL_TIMEOUT_SECONDS", 30.0),
    "RUN_DEADLINE_SECONDS": env_int("AGENTPORTAL_RUN_DEADLINE_SECONDS", 600),
    "WAIT_SECONDS": env_int("AGENTPORTAL_WAIT_SECONDS", 24 * 3600),
    # When a colleague is due to follow up on a create_followup_request.
    "FOLLOWUP_DUE_SECONDS": env_int("AGENTPORTAL_FOLLOWUP_DUE_SECONDS", 24 * 3600),
    "SLICE_SECONDS": env_float("AGENTPORTAL_SLICE_SECONDS", 120.0),
    "LEASE_SECONDS": env_float("AGENTPORTAL_LEASE_SECONDS", 125.0),
    "TICK_CLAIM_SECONDS": env_float("AGENTPORTAL_TICK_CLAIM_SECONDS", 20.0),
    "TICK_BUDGET_SECONDS": env_float("AGENTPORTAL_TICK_BUDGET_SECONDS", 110.0),
    # Runs one worker process holds at once; their steps are committed together in rounds, and
    # their model calls wait on one event loop without a thread each.
    "WORKER_IN_FLIGHT": WORKER_IN_FLIGHT,
    "WEB_PROCESSES": WEB_PROCESSES,
    # Turns /metrics on, for scrapers that send it as a bearer token.
    "METRICS_TOKEN": os.environ.get("AGENTPORTAL_METRICS_TOKEN", ""),
    # Steps committed together in one round, at most (measured: 16 is best on both databases).
    "ROUND_RUNS": env_count("AGENTPORTAL_ROUND_RUNS", 16),
    # Model calls in flight per endpoint and model, per worker process.
    "MODEL_CONCURRENCY": env_count("AGENTPORTAL_MODEL_CONCURRENCY", WORKER_IN_FLIGHT),
    # Threads for tools that block (and for calls of stopped runs that ignore their token).
    "TOOL_THREADS": env_count("AGENTPORTAL_TOOL_THREADS", 32),
    # How long a model call may keep waiting on an endpoint that answers 429.
    "MODEL_THROTTLE_SECONDS": env_float("AGENTPORTAL_MODEL_THROTTLE_SECONDS", 300.0),
    "CANCEL_POLL_SECONDS": 0.25,
    "MAX_MODEL_CALLS": 6,
    "MAX_STEPS": 20,
    "MAX_TOOL_CALLS_PER_TURN": 4,
    "MAX_OPEN_RUNS_PER_ACCOUNT": 3,
    # A customer's open conversations, their messages waiting behind busy runs (all
    # conversations together), and event streams open at once per API key.
    "MAX_OPEN_CONVERSATIONS_PER_CUSTOMER": env_int("AGENTPORTAL_MAX_OPEN_CONVERSATIONS", 10),
    "MAX_QUEUED_MESSAGES_PER_CUSTOMER": env_int("AGENTPORTAL_MAX_QUEUED_MESSAGES", 20),
    "MAX_EVENT_STREAMS_PER_KEY": env_int("AGENTPORTAL_MAX_EVENT_STREAMS_PER_KEY", 4),
    "DEFAULT_MAX_RUNNING_RUNS": env_int("AGENTPORTAL_MAX_RUNNING_RUNS", 8),
}

LOG_FORMAT = os.environ.get("AGENTPORTAL_LOG_FORMAT", "plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"AGENTPORTAL_LOG_FORMAT must be plain or json, not {LOG_FORMAT!r}.")
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
    "root": {"handlers": ["console"], "level": os.environ.get("AGENTPORTAL_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "django-q": {"level": os.environ.get("AGENTPORTAL_Q_LOG_LEVEL", "WARNING")},
        # The HTTP client logs every model call at INFO: a line per call, hundreds a second.
        # The runtime records each call as a ModelAttempt instead.
        "httpx2": {"level": "WARNING"},
        "httpcore2": {"level": "WARNING"},
    },
}
