"""Settings, read from the environment (README, Settings). Bad values stop start-up with a
message naming the variable; see handoff_site/env.py."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from delegations.protocol.adapters.endpoints import (
    ModelEndpoint,
    builtin_endpoints,
    parse_endpoints,
)

from . import otel_env
from .env import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("HANDOFF_DATA_DIR", str(BASE_DIR / "var")))
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment; for a local install, one generated once and kept
    in the data folder so sessions survive restarts. Never a fixed default."""
    key = env_str("SECRET_KEY")
    if key:
        return key
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "ninja",
    "django_tasks_db",
    "skills",
    "delegations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "handoff_site.static_files.StaticFiles",   # WhiteNoise, for static paths only
    "handoff_site.loop_middleware.SessionMiddleware",
    "handoff_site.loop_middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "handoff_site.form_text.FormTextLimits",
    "handoff_site.loop_middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "handoff_site.loop_middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "handoff_site.urls"
ASGI_APPLICATION = "handoff_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "handoff_site.template_engine.PrintableDjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "handoff_site.context_processors.navigation",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------
_database_url = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'db.sqlite3'}")
try:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=0)}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout let the embedded worker thread and web requests share the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A closed connection waits in a pool for the next thread (sqlite_pooled): each request
    # runs in a thread of its own, and gives its connection back as it ends.
    DATABASES["default"]["ENGINE"] = "handoff_site.sqlite_pooled"
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["TEST"] = {"NAME": env_str("HANDOFF_TEST_DB", str(DATA_DIR / "test-db.sqlite3"))}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Connections come from a pool, each checked as it is handed out: a PostgreSQL
    # restarted or a backend terminated costs a reconnect, not an error or a wait
    # (postgres_pooled). Each process keeps at most HANDOFF_DATABASE_POOL_SIZE. The URL's
    # own options (?sslmode=require ...) stay.
    DATABASES["default"]["ENGINE"] = "handoff_site.postgres_pooled"
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2, "max_size": env_int("HANDOFF_DATABASE_POOL_SIZE", 20, minimum=2), "timeout": 30}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels -------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
HANDOFF_SIBLINGS_HUB = env_str("HANDOFF_SIBLINGS_HUB")   # set by `serve --processes N` for its processes
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "capacity": 5000, "expiry": 30},
        }
    }
else:
    # The in-memory layer silently drops past its capacity (100 by default): raise it. A
    # process of `serve --processes N` is given its siblings' hub by the supervisor, and
    # its layer carries group messages to them (delegations/live/siblings.py).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 20000, "expiry": 60},
        }
    }
    if HANDOFF_SIBLINGS_HUB:
        CHANNEL_LAYERS["default"] = {"BACKEND": "delegations.live.siblings.SiblingChannelLayer",
                                     "CONFIG": {"hub": HANDOFF_SIBLINGS_HUB, "capacity": 20000, "expiry": 60}}

# --- background tasks (django.tasks) ---------------------------------------------------
HANDOFF_TASK_BACKEND = env_choice("HANDOFF_TASK_BACKEND", "db", ("db", "rq", "immediate"))
if HANDOFF_TASK_BACKEND == "rq":
    if not REDIS_URL:
        raise ImproperlyConfigured("HANDOFF_TASK_BACKEND=rq needs REDIS_URL (the RQ queues live in Redis).")
    TASKS = {"default": {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]}}
    RQ_QUEUES = {"default": {"URL": REDIS_URL}}
elif HANDOFF_TASK_BACKEND == "immediate":
    TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
else:
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# `manage.py serve` runs a worker thread inside the server process unless this is off.
HANDOFF_EMBEDDED_WORKER = env_bool("HANDOFF_EMBEDDED_WORKER", True)

# --- auth -----------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "delegations:dashboard"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from hx-headers, not the cookie

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve from the app folders without collectstatic
MEDIA_ROOT = DATA_DIR / "media"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # no log line holds a secret's value (delegations/runs/redaction.py)
    "filters": {"secrets": {"()": "delegations.runs.redaction.SecretsLogFilter"},
                "client_errors": {"()": "handoff_site.log_filters.ClientErrorsInOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain",
                             "filters": ["secrets"]}},
    "root": {"handlers": ["console"], "level": env_choice(
        "LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))},
    "loggers": {"django_tasks_db": {"level": "WARNING"}, "uvicorn.error": {"level": "WARNING"},
                "django.request": {"filters": ["client_errors"]}},
}

# --- Handoff ----------------------------------------------------------------------------
HANDOFF_DEFAULT_ADAPTER = env_choice(
    "HANDOFF_DEFAULT_ADAPTER", "local", ("local", "openai", "anthropic", "scripted"))
HANDOFF_LOCAL_MODEL = env_str("HANDOFF_LOCAL_MODEL")  # empty: the catalog's default model
HANDOFF_LOCAL_MODEL_PATH = env_str("HANDOFF_LOCAL_MODEL_PATH")  # set: wins over HANDOFF_LOCAL_MODEL
HANDOFF_OPENAI_MODEL = env_str("HANDOFF_OPENAI_MODEL", "gpt-4o-mini")
HANDOFF_ANTHROPIC_MODEL = env_str("HANDOFF_ANTHROPIC_MODEL", "claude-sonnet-4-5")


def _model_endpoints() -> dict[str, ModelEndpoint]:
    """The hosts runs may call and the variables holding their keys: the built-in openai and
    anthropic endpoints, then HANDOFF_MODEL_ENDPOINTS (README, Model endpoints and secrets).
    A run picks one by name; it never names a host or a variable itself."""
    try:
        configured = parse_endpoints(env_str("HANDOFF_MODEL_ENDPOINTS"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"HANDOFF_MODEL_ENDPOINTS: {exc}.") from None
    return {**builtin_endpoints(os.environ, openai_model=HANDOFF_OPENAI_MODEL,
                                anthropic_model=HANDOFF_ANTHROPIC_MODEL), **configured}


HANDOFF_MODEL_ENDPOINTS = _model_endpoints()
# Environment variables whose values are secrets besides the endpoints' keys: never stored
# or shown (SECRET_KEY and the passwords in DATABASE_URL, REDIS_URL and HANDOFF_CACHE_URL
# always are; README, Model endpoints and secrets).
HANDOFF_SECRET_ENV_VARS = env_list("HANDOFF_SECRET_ENV_VARS", [])
HANDOFF_MAX_DEPTH = env_int("HANDOFF_MAX_DEPTH", 3, minimum=0)
HANDOFF_LANE_SIZE = env_int("HANDOFF_LANE_SIZE", 8, minimum=1)
# Backpressure: root runs waiting to start (PENDING), per owner and in all; a run past
# either bound is refused with 429 and Retry-After instead of growing the backlog.
HANDOFF_MAX_PENDING_RUNS_PER_OWNER = env_int("HANDOFF_MAX_PENDING_RUNS_PER_OWNER", 50, minimum=1)
HANDOFF_MAX_PENDING_RUNS = env_int("HANDOFF_MAX_PENDING_RUNS", 500, minimum=1)
HANDOFF_SOFT_BUDGET_THRESHOLD = env_float("HANDOFF_SOFT_BUDGET_THRESHOLD", 0.8, minimum=0.0, maximum=1.0)
HANDOFF_PAYLOAD_LIMIT_BYTES = env_int("HANDOFF_PAYLOAD_LIMIT_BYTES", 65536, minimum=1024)
HANDOFF_ARCHIVE_AFTER_MINUTES = env_int("HANDOFF_ARCHIVE_AFTER_MINUTES", 60, minimum=1)
HANDOFF_APPROVAL_REQUIRED_CAPABILITIES = env_list(
    "HANDOFF_APPROVAL_REQUIRED_CAPABILITIES", ["network_outbound", "file_delete", "financial_tx"])
HANDOFF_PYTHON_SKILL_ALLOWLIST = env_list("HANDOFF_PYTHON_SKILL_ALLOWLIST", [])
HANDOFF_WORKSPACE_ROOT = Path(env_str("HANDOFF_WORKSPACE_ROOT", str(DATA_DIR / "workspaces")))
HANDOFF_SUBPROCESS_ENABLED = env_bool("HANDOFF_SUBPROCESS_ENABLED", False)


def _stdio_commands(name: str) -> dict[str, list[str]]:
    """The stdio MCP servers an MCP server record may start, as a JSON object of name ->
    argv (README, MCP servers for runs); none unless the operator lists them."""
    try:
        commands = json.loads(env_str(name) or "{}")
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object of name -> argv: {exc}.") from None
    if not isinstance(commands, dict) or not all(
            isinstance(argv, list) and argv and all(isinstance(part, str) for part in argv)
            for argv in commands.values()):
        raise ImproperlyConfigured(f'{name} must be a JSON object of name -> argv list, '
                                   f'e.g. {{"files": ["/usr/local/bin/mcp-files", "--read-only"]}}.')
    return commands


HANDOFF_MCP_STDIO_COMMANDS = _stdio_commands("HANDOFF_MCP_STDIO_COMMANDS")
# Run trees one worker process (the server's embedded worker, an RQ worker) executes at once;
# a run waiting on its model or on a person takes a place but no thread.
HANDOFF_WORKER_CAPACITY = env_int("HANDOFF_WORKER_CAPACITY", 500, minimum=1)
HANDOFF_LEASE_SECONDS = env_int("HANDOFF_LEASE_SECONDS", 30, minimum=5)
if DATABASES["default"]["ENGINE"] == "handoff_site.postgres_pooled":
    # A process stalled inside a transaction (paused, swapped out, its machine frozen) keeps
    # the rows it locked: the run it was writing, its owner's lane. Nothing Handoff does
    # waits inside a transaction, so a session idle in one for a whole lease period is such
    # a process: the server ends it, which rolls its writes back and frees the locks, and
    # the sweeper can hand the tree to another worker (its lease ran out meanwhile too).
    _pg_options = DATABASES["default"].setdefault("OPTIONS", {})
    _pg_options["options"] = " ".join(filter(None, [
        _pg_options.get("options"), f"-c idle_in_transaction_session_timeout={HANDOFF_LEASE_SECONDS}s"]))
HANDOFF_SKILL_UPLOAD_LIMIT_BYTES = env_int("HANDOFF_SKILL_UPLOAD_LIMIT_BYTES", 5 * 1024 * 1024, minimum=1024)
# the largest run export (JSON) the import page and POST /api/runs/import take
HANDOFF_RUN_IMPORT_LIMIT_BYTES = env_int("HANDOFF_RUN_IMPORT_LIMIT_BYTES", 25 * 1024 * 1024, minimum=1024)

# --- the approval inbox ---------------------------------------------------------------
# Nobody decides the items of a run they started unless this is on.
HANDOFF_ALLOW_SELF_APPROVAL = env_bool("HANDOFF_ALLOW_SELF_APPROVAL", False)
_APPROVAL_KINDS = ("capability", "capability_request", "budget", "clarification", "invalid_result")


def _approval_expiry(name: str, default_s: int) -> dict[str, int]:
    """Seconds an item of each kind waits for a decision before it expires (0: never).
    The variable holds one number for every kind, or ``kind=seconds`` pairs
    (``capability=3600,budget=600``; kinds left out keep the default)."""
    expiry = dict.fromkeys(_APPROVAL_KINDS, default_s)
    raw = env_str(name)
    for part in (p.strip() for p in raw.split(",") if p.strip()):
        kind, _, seconds = part.rpartition("=")
        if kind and kind not in expiry:
            raise ImproperlyConfigured(f"{name}: unknown kind {kind!r}; the kinds are {', '.join(_APPROVAL_KINDS)}.")
        if not seconds.isdigit():
            raise ImproperlyConfigured(f"{name}={raw!r}: {part!r} is not a whole number of seconds "
                                       f"(write 86400, or capability=3600,budget=600).")
        for key in [kind] if kind else _APPROVAL_KINDS:
            expiry[key] = int(seconds)
    return expiry


HANDOFF_APPROVAL_EXPIRY = _approval_expiry("HANDOFF_APPROVAL_EXPIRY", 24 * 3600)
# A result still invalid after the self-correction turn: "ask" puts it to a person (accept
# as partial, retry, fail); "fail" ends the run FAILED (ERR_INVALID_RESULT) at once.
HANDOFF_INVALID_RESULT_POLICY = env_choice("HANDOFF_INVALID_RESULT_POLICY", "ask", ("ask", "fail"))
# POSTed {id, kind, title, risk, run_id, url} when an inbox item opens (empty: off).
HANDOFF_INBOX_WEBHOOK_URL = env_str("HANDOFF_INBOX_WEBHOOK_URL")
HANDOFF_INBOX_WEBHOOK_TRIES = env_int("HANDOFF_INBOX_WEBHOOK_TRIES", 3, minimum=1)
HANDOFF_INBOX_WEBHOOK_BACKOFF_S = env_float("HANDOFF_INBOX_WEBHOOK_BACKOFF_S", 2.0, minimum=0.0, maximum=600.0)
# Where people reach this site: links sent out of it (the webhook's) start with it.
HANDOFF_BASE_URL = env_str("HANDOFF_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

# --- the A2A server ---------------------------------------------------------------------
# The longest a SendMessage without returnImmediately holds its connection (seconds); past
# it the task is answered as it stands (still working) and the caller follows it with
# GetTask or SubscribeToTask.
HANDOFF_A2A_SEND_WAIT_S = env_float("HANDOFF_A2A_SEND_WAIT_S", 120.0, minimum=0.0, maximum=3600.0)
# An A2A caller's push notifications go to public addresses only, unless this is on (a
# receiver on this machine or the private network the site runs in).
HANDOFF_A2A_PUSH_ALLOW_PRIVATE = env_bool("HANDOFF_A2A_PUSH_ALLOW_PRIVATE", False)

# --- traces (OpenTelemetry) ---------------------------------------------------------------
# README, Traces. Run trees are exported as OTLP traces when a collector is named with the
# standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT; the other standard OTEL_* variables tune it
# and are checked here (otel_env.py), so a wrong one stops start-up naming it.
otel_env.check(os.environ)
HANDOFF_TRACES_ENABLED = otel_env.traces_enabled(os.environ)
HANDOFF_TRACE_CAPTURE_CONTENT = otel_env.capture_content(os.environ)
HANDOFF_TRACE_CONTENT_MAX_CHARS = otel_env.content_max_chars(os.environ)
HANDOFF_TRACE_URL_TEMPLATE = otel_env.trace_url_template(os.environ)
# the exporter's header values (a vendor's API key) are kept out of runs like other secrets
HANDOFF_OTLP_HEADER_SECRETS = otel_env.header_values(os.environ)

# --- scale-out --------------------------------------------------------------------------
# README, Scale-out. RQ workers are `manage.py rqworker --job-class django_tasks_rq.Job
# default`: django_rq provides the command, and RQ["WORKER_CLASS"] makes every one of them
# a Handoff worker (a heartbeat, and the sweeper that resumes the runs of dead workers).
# A job runs a tree until it ends or parks; RQ kills the work horse of a job that passes
# the timeout (its run is then resumed from its checkpoint by the sweeper), so it must be
# longer than the longest run's hard timeout (timeout_s). RQ's own default is 180 s.
HANDOFF_RQ_JOB_TIMEOUT = env_int("HANDOFF_RQ_JOB_TIMEOUT", 3600, minimum=60)
if HANDOFF_TASK_BACKEND == "rq":
    INSTALLED_APPS.append("django_rq")
    # (mypy inferred the dict above as str-valued; RQ takes the timeout in seconds)
    RQ_QUEUES["default"]["DEFAULT_TIMEOUT"] = HANDOFF_RQ_JOB_TIMEOUT  # type: ignore[assignment]
    RQ = {"WORKER_CLASS": "delegations.runs.worker.HandoffRQWorker"}
if REDIS_URL:
    # redis-py 8 reads with a 5 s socket timeout by default, which is exactly how long
    # channels_redis blocks waiting for a message (BZPOPMIN, 5 s): every receive on a quiet
    # channel failed with "Timeout reading", and the run feed paused 1 s before receiving
    # again (the readiness roundtrip failed every other probe). Longer than the blocking
    # wait, a read times out only when Redis is really gone. (mypy inferred the layer's
    # settings as a collection of str, as for RQ_QUEUES above.)
    CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [  # type: ignore[index]
        {"address": REDIS_URL, "socket_timeout": 15}]

# --- security and rate limits ----------------------------------------------------------
# Failed logins and API tokens (delegations/accounts/rate_limits.py): past the limit within
# the window, 429 with Retry-After. Counted in HANDOFF_RATE_LIMIT_CACHE; with several server
# processes make it a shared cache (Redis), or each process counts on its own.
HANDOFF_LOGIN_MAX_FAILURES = env_int("HANDOFF_LOGIN_MAX_FAILURES", 5, minimum=1)
HANDOFF_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("HANDOFF_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1)
HANDOFF_LOGIN_WINDOW_S = env_int("HANDOFF_LOGIN_WINDOW_S", 15 * 60, minimum=1)
HANDOFF_TOKEN_MAX_FAILURES = env_int("HANDOFF_TOKEN_MAX_FAILURES", 20, minimum=1)
HANDOFF_TOKEN_WINDOW_S = env_int("HANDOFF_TOKEN_WINDOW_S", 5 * 60, minimum=1)
HANDOFF_RATE_LIMIT_CACHE = env_str("HANDOFF_RATE_LIMIT_CACHE", "default")
# A cache every server process shares (the scale-out recipe sets it to its Redis): the
# limits above then count across processes. Unset, each process has its own memory cache.
# The processes of `serve --processes N` share one in their database (migration 0019).
CACHE_URL = env_str("HANDOFF_CACHE_URL")
if CACHE_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL,
                          "KEY_PREFIX": "handoff"}}
elif HANDOFF_SIBLINGS_HUB:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "handoff_cache"}}
# The proxies (addresses or networks, comma-separated; "*": any) whose X-Forwarded-For and
# X-Forwarded-Proto `manage.py serve` believes: the client is then the last address a
# trusted proxy appended. Unset, nobody's: the connecting address is the client, so a
# forged header can neither dodge the limits above nor lock out someone else's address.
FORWARDED_ALLOW_IPS = env_list("FORWARDED_ALLOW_IPS", [])
if env_str("HANDOFF_CLIENT_IP_HEADER"):
    raise ImproperlyConfigured("HANDOFF_CLIENT_IP_HEADER is no longer read (it believed the header from any "
                               "address): unset it and set FORWARDED_ALLOW_IPS to your proxy's address.")
# A request's headers, in bytes and in number: past them the server answers 431 before the
# request reaches Django (400 when the head was too large to buffer while it arrived).
HANDOFF_MAX_HEADER_BYTES = env_int("HANDOFF_MAX_HEADER_BYTES", 32 * 1024, minimum=4096)
HANDOFF_MAX_HEADERS = env_int("HANDOFF_MAX_HEADERS", 100, minimum=20)

# HTTPS in production, behind a proxy that terminates TLS and sets X-Forwarded-Proto:
# HANDOFF_SECURE=1 makes `manage.py check --deploy` clean (tests/security/test_deploy.py).
HANDOFF_SECURE = env_bool("HANDOFF_SECURE", False)
if HANDOFF_SECURE:
    if DEBUG:
        raise ImproperlyConfigured("HANDOFF_SECURE=1 with DEBUG=1: turn DEBUG off in production.")
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("HANDOFF_SSL_REDIRECT", True)
    # load balancers probe over plain HTTP
    SECURE_REDIRECT_EXEMPT = [r"^api/health$", r"^api/ready$"]
    SECURE_HSTS_SECONDS = env_int("HANDOFF_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HANDOFF_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("HANDOFF_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
