"""Settings shared by every environment; all of it comes from the environment.

The defaults match the servers on loopback described in docs/configuration.md, so a fresh
checkout runs without any configuration file.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.client import parse_trusted_proxies

from .env import (
    env_bool,
    env_int,
    parse_cluster_credentials,
    parse_cluster_url,
    parse_db_retry_seconds,
    parse_rate,
    parse_redis_prefix,
    parse_retention_days,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")
    if h.strip()
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
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "import_export",
    "django_celery_beat",
    "axes",
    "core",
    "accounts",
    "inventory",
    "orders",
    "reconciliation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin and the report in the browser's language (English or zh-hans).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Locks out an admin login after repeated failures (django-axes).
    "axes.middleware.AxesMiddleware",
]

# The REST API's chain (seckill_site.wsgi): token-authenticated JSON needs the
# transport security headers and nothing that serves sessions, forms or pages.
API_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("SECKILL_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = env_int("SECKILL_LOGIN_COOLOFF_MINUTES", 15) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Locked out per client (core.client), not per proxy.
AXES_CLIENT_IP_CALLABLE = "core.client.request_client_address"
# Proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For names the
# client: for the unknown-token limit, the admin lockout and logs (core.client).
SECKILL_TRUSTED_PROXIES = parse_trusted_proxies(os.environ.get("SECKILL_TRUSTED_PROXIES", ""))

ROOT_URLCONF = "seckill_site.urls"
WSGI_APPLICATION = "seckill_site.wsgi.application"

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

DATABASE_URL = os.environ.get("DATABASE_URL", "mysql://root:@127.0.0.1:3306/seckill")
# Health checks: a persistent connection that a MariaDB restart broke is replaced
# at its first use in a request (paths that use no MySQL pay nothing).
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=600, conn_health_checks=True)}
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].update(
    {
        "charset": "utf8mb4",
        # READ COMMITTED: the stock rows are moved with conditional UPDATEs and
        # explicit row locks, so gap locks of REPEATABLE READ only add deadlocks.
        "isolation_level": "read committed",
        "init_command": "SET sql_mode='STRICT_TRANS_TABLES', innodb_lock_wait_timeout=10",
    }
)
DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# redis+cluster://host:port[,host:port...] picks a Redis Cluster (core.redis.cluster);
# redis:// one server through django-redis.
REDIS_CLUSTER_NODES = parse_cluster_url(REDIS_URL)
REDIS_CLUSTER_USERNAME, REDIS_CLUSTER_PASSWORD = parse_cluster_credentials(REDIS_URL)
# Every key the project writes starts with this, so a suite, a benchmark and a
# fault run can share one cluster (which has database 0 only) without meeting.
SECKILL_REDIS_PREFIX = parse_redis_prefix(os.environ.get("SECKILL_REDIS_PREFIX", "seckill"))
# How long a Redis master cut off from its replicas may still accept writes:
# min-replicas-max-lag (2 s) plus the second a replica waits between two acks. A
# lost shard's fences wait this long on top of the publish budget, without
# counting on the node timeout that delays its replica's promotion: that margin
# also covers a master paused a little longer than its failover (a process that
# has not met the promotion yet may still be waiting on it when it resumes;
# docs/architecture.md, "On a Redis Cluster").
SECKILL_REDIS_CUTOFF_MS = env_int("SECKILL_REDIS_CUTOFF_MS", 3000 if REDIS_CLUSTER_NODES else 0)
if REDIS_CLUSTER_NODES:
    # Nothing of the project uses Django's cache; django-redis cannot speak to a cluster.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                # connections whose failed connect says the call never ran (core.redis.errors.NotSent)
                "CONNECTION_POOL_CLASS": "core.redis.connection.Pool",
                "SOCKET_CONNECT_TIMEOUT": 2,
                "SOCKET_TIMEOUT": 2,
            },
            "KEY_PREFIX": "seckill-cache",
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = os.environ.get("LANGUAGE_CODE", "en-us")
# A date-time given without an offset (commands, admin) is in this zone.
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.CachedTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 20,
    "EXCEPTION_HANDLER": "core.exception_handler.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Seckill inventory API",
    # /api/schema/ is rendered from the declarations (core.api), with this title;
    # drf-spectacular serves the docs pages only.
    "DESCRIPTION": "Flash-sale orders and stock. Errors are {code, detail} with the codes each answer lists; "
                   "request bodies ignore properties they do not declare.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from the drf-spectacular-sidecar package: nothing
    # is fetched from the internet when /api/docs/ is opened.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI would send the schema to its public validator otherwise.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# --- Seckill domain -------------------------------------------------------
SECKILL_PAYMENT_TIMEOUT_SECONDS = env_int("SECKILL_PAYMENT_TIMEOUT_SECONDS", 900)
# An in-flight reservation older than this with no order in MySQL is an orphan:
# its confirm message is published again (the message may have been lost).
SECKILL_ORPHAN_GRACE_SECONDS = env_int("SECKILL_ORPHAN_GRACE_SECONDS", 10)
SECKILL_ORPHAN_SWEEP_SECONDS = env_int("SECKILL_ORPHAN_SWEEP_SECONDS", 5)
SECKILL_EXPIRY_SWEEP_SECONDS = env_int("SECKILL_EXPIRY_SWEEP_SECONDS", 5)
SECKILL_OUTBOX_SWEEP_SECONDS = env_int("SECKILL_OUTBOX_SWEEP_SECONDS", 5)
SECKILL_DEAD_LETTER_SWEEP_SECONDS = env_int("SECKILL_DEAD_LETTER_SWEEP_SECONDS", 30)
SECKILL_RECONCILE_SECONDS = env_int("SECKILL_RECONCILE_SECONDS", 300)
# Retention (docs/architecture.md, "Bounded data"): rows nothing depends on are deleted once
# older than this many days (1 or more, fractions allowed), by a beat sweep this often;
# the Redis keys of an ended SKU with nothing in flight or pending go this long
# after its sale ended. A give that meets no snapshot is sent again after
# base * 2^attempts seconds, at most the cap.
SECKILL_RETENTION_DAYS = parse_retention_days(os.environ.get("SECKILL_RETENTION_DAYS", ""))
SECKILL_RETENTION_SWEEP_SECONDS = env_int("SECKILL_RETENTION_SWEEP_SECONDS", 3600)
SECKILL_ENDED_REDIS_GRACE_SECONDS = env_int("SECKILL_ENDED_REDIS_GRACE_SECONDS", 86400)
SECKILL_GIVE_RETRY_BASE_SECONDS = env_int("SECKILL_GIVE_RETRY_BASE_SECONDS", 60)
SECKILL_GIVE_RETRY_CAP_SECONDS = env_int("SECKILL_GIVE_RETRY_CAP_SECONDS", 3600)
# Bearer token a monitoring system presents to /reconciliation/metrics (else: staff login).
SECKILL_METRICS_TOKEN = os.environ.get("SECKILL_METRICS_TOKEN", "")
# Requests per process may skip the Redis gate for this long after it said
# "sold out" (see orders.services.place.order_place).
SECKILL_SOLD_OUT_MEMO_SECONDS = float(os.environ.get("SECKILL_SOLD_OUT_MEMO_SECONDS", "0.5"))
# Largest number of reservations one confirm transaction takes.
SECKILL_CONFIRM_BATCH = env_int("SECKILL_CONFIRM_BATCH", 2000)
# The confirm consumer (orders.consumers) takes up to this many messages from
# the broker at once, and waits at most this long for a batch to fill.
SECKILL_CONFIRM_PREFETCH = env_int("SECKILL_CONFIRM_PREFETCH", 4000)
SECKILL_CONFIRM_LINGER_MS = env_int("SECKILL_CONFIRM_LINGER_MS", 100)
SECKILL_CONFIRM_CONSUMER = env_bool("SECKILL_CONFIRM_CONSUMER", True)
# The bucket mover (orders.movers) applies pay/cancel/expiry to the SKU rows in
# batches, looking for waiting moves this often.
SECKILL_MOVER = env_bool("SECKILL_MOVER", True)
SECKILL_MOVER_INTERVAL_MS = env_int("SECKILL_MOVER_INTERVAL_MS", 100)
# Reservations per message when several travel together (orphan sweep).
SECKILL_MESSAGE_CHUNK = env_int("SECKILL_MESSAGE_CHUNK", 100)
# The purchase path's publish must be confirmed within this long after the
# reserve, or the request answers 503 and the reservation is undone (and
# tombstoned in MySQL in case the broker stored it after all).
SECKILL_PUBLISH_BUDGET_MS = env_int("SECKILL_PUBLISH_BUDGET_MS", 2000)
# A request or sweep waits this long for MariaDB to come back (a lost
# connection, a Galera node that left the cluster) before it answers 503.
SECKILL_DB_RETRY_SECONDS = parse_db_retry_seconds(os.environ.get("SECKILL_DB_RETRY_SECONDS", ""))
# The orphan sweep republishes at most this many reservations per SKU per run,
# and waits longer between two republishes of the same one as it ages (capped).
SECKILL_ORPHAN_SWEEP_CAP = env_int("SECKILL_ORPHAN_SWEEP_CAP", 2000)
SECKILL_ORPHAN_MAX_WAIT_SECONDS = env_int("SECKILL_ORPHAN_MAX_WAIT_SECONDS", 300)
# Lifetimes of the Redis markers (docs/architecture.md, "state stays bounded"):
# - applied gives/freezes/repairs and undone reservations: the longest
#   redelivery we guard against in Redis (MySQL holds the durable record);
# - done (confirmed and settled): only the web's ambiguous-publish check and
#   quick redeliveries need it, MySQL answers the rest;
# - an Idempotency-Key is remembered this long (Redis), forever in MySQL.
SECKILL_MARKER_LIFETIME_SECONDS = env_int("SECKILL_MARKER_LIFETIME_SECONDS", 86400)
SECKILL_DONE_MARKER_SECONDS = env_int("SECKILL_DONE_MARKER_SECONDS", 3600)
SECKILL_IDEMPOTENCY_SECONDS = env_int("SECKILL_IDEMPOTENCY_SECONDS", 86400)
SECKILL_MAX_QUANTITY = 1000
# POST orders per user: "N/s", "N/m" or "N/h" (a token bucket of N), 0 = off.
SECKILL_THROTTLE_RATE = os.environ.get("SECKILL_THROTTLE_RATE", "10/s")
SECKILL_THROTTLE = parse_rate(SECKILL_THROTTLE_RATE)
# pay, cancel, list and detail per user, in the same format (a budget of its own,
# spent in the same round trip as the token): generous for a buyer's page,
# enough to keep one user from sending bodies and MySQL reads in bulk.
SECKILL_ORDER_CALLS_RATE = os.environ.get("SECKILL_ORDER_CALLS_RATE", "20/s")
SECKILL_ORDER_CALLS = parse_rate(SECKILL_ORDER_CALLS_RATE, "SECKILL_ORDER_CALLS_RATE")
# Unknown tokens per client address per minute before it is refused (429)
# without asking MySQL; 0 = no limit.
SECKILL_AUTH_FAILURES_PER_MINUTE = env_int("SECKILL_AUTH_FAILURES_PER_MINUTE", 30)
# A valid token's cached record lives this long: a deactivation made outside
# the signals (bulk update, SQL) takes effect within it.
SECKILL_TOKEN_CACHE_SECONDS = env_int("SECKILL_TOKEN_CACHE_SECONDS", 300)
# While a token's deletion is being committed it is refused; if the deletion
# rolls back, the token works again after this long.
SECKILL_TOKEN_REVOKING_SECONDS = env_int("SECKILL_TOKEN_REVOKING_SECONDS", 10)
# Largest API request body (413 too_large beyond it).
SECKILL_MAX_BODY_BYTES = env_int("SECKILL_MAX_BODY_BYTES", 16384)
SECKILL_BENCH_ENDPOINTS = env_bool("SECKILL_BENCH_ENDPOINTS", False)
# Largest ops-console export (rows); beyond it the admin asks for a filter, so
# one export cannot hold a web worker for minutes (docs/operations.md, "The ops console").
SECKILL_EXPORT_MAX_ROWS = env_int("SECKILL_EXPORT_MAX_ROWS", 10000)
# A control character in one cell (a SKU name from an import) would make a whole
# XLSX export fail; openpyxl cannot store it, so it is written as U+FFFD.
IMPORT_EXPORT_ESCAPE_ILLEGAL_CHARS_ON_EXPORT = True
# The payment provider's webhook (POST payments/webhook) checks its signature
# with this secret; while it is empty the webhook answers 404. The buyer's own
# POST pay (local demo, tests, benchmark) is refused when SECKILL_BUYER_PAY=0,
# the production settings' default.
SECKILL_PAYMENT_WEBHOOK_SECRET = os.environ.get("SECKILL_PAYMENT_WEBHOOK_SECRET", "")
SECKILL_BUYER_PAY = env_bool("SECKILL_BUYER_PAY", True)
# The shop's currency (ISO 4217): every order records it beside its amount, and
# a capture in another currency pays nothing (a refund to make).
SECKILL_CURRENCY = os.environ.get("SECKILL_CURRENCY", "CNY")
if not re.fullmatch(r"[A-Z]{3}", SECKILL_CURRENCY):
    raise ImproperlyConfigured(f"SECKILL_CURRENCY must be an ISO 4217 code (three capitals), not {SECKILL_CURRENCY!r}")
# Demo users (seed_demo) exist only where a settings module allows them.
SECKILL_DEMO_USERS = False
# True under the production settings only.
SECKILL_PRODUCTION = False

# Alerts (reconciliation.alerts): stable drifts, alert findings and new dead
# letters go to ADMINS by mail and, when set, as a JSON POST to this URL.
SECKILL_ALERT_WEBHOOK = os.environ.get("SECKILL_ALERT_WEBHOOK", "")
SECKILL_ALERT_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("SECKILL_ALERT_WEBHOOK_TIMEOUT_SECONDS", "2"))
# "Name <a@example.com>,Other <b@example.com>"
from email.utils import getaddresses  # noqa: E402

ADMINS = [getaddresses([a])[0] for a in os.environ.get("SECKILL_ADMINS", "").split(",") if a.strip()]
SERVER_EMAIL = os.environ.get("SERVER_EMAIL", "seckill@localhost")
# Without an SMTP server configured, mail goes to the log (console), never lost silently in a test.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 5)
# A 500's report to ADMINS lists the settings: hide URL credentials and webhooks there too.
DEFAULT_EXCEPTION_REPORTER_FILTER = "core.reporting.SecretsReporterFilter"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
    # 4xx answers are the normal outcome of a sale (sold out, limit): not worth a log line each.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "django.request": {"level": "ERROR"}},
}

# The task signing key: from the environment (production requires it; local
# settings derive a development one when it is unset).
SECKILL_TASK_SIGNING_KEY = os.environ.get("SECKILL_TASK_SIGNING_KEY", "")

from .celery import *  # noqa: E402, F403  (the Celery and RabbitMQ layout)
