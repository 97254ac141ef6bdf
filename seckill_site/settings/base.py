"""Settings shared by every environment; all of it comes from the environment.

The defaults match the servers on loopback described in README.md, so a fresh
checkout runs without any configuration file.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import dj_database_url
from kombu import Exchange, Queue

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


_PERIODS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(raw: str) -> tuple[int, int]:
    """ "10/s" -> (a bucket of 10, one request earned back every 100 ms); "0" -> off."""
    raw = raw.strip()
    if raw in ("", "0", "off"):
        return 0, 0
    try:
        count, period = raw.split("/")
        n, unit = int(count), period.strip()[0]
        if n < 1 or unit not in _PERIODS_MS:
            raise ValueError
    except (ValueError, IndexError):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"SECKILL_THROTTLE_RATE: expected N/s, N/m, N/h or 0, got {raw!r}") from None
    return n, max(1, _PERIODS_MS[unit] // n)


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
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Locks out an admin login after repeated failures (django-axes).
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("SECKILL_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = env_int("SECKILL_LOGIN_COOLOFF_MINUTES", 15) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

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
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
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
    "DESCRIPTION": "Flash-sale orders and stock. Errors are {code, detail}.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
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
# Bearer token a monitoring system presents to /reconciliation/metrics (else: staff login).
SECKILL_METRICS_TOKEN = os.environ.get("SECKILL_METRICS_TOKEN", "")
# Requests per process may skip the Redis gate for this long after it said
# "sold out" (see orders.services.order_place).
SECKILL_SOLD_OUT_MEMO_SECONDS = float(os.environ.get("SECKILL_SOLD_OUT_MEMO_SECONDS", "0.5"))
# Largest number of reservations one confirm transaction takes.
SECKILL_CONFIRM_BATCH = env_int("SECKILL_CONFIRM_BATCH", 1000)
# The confirm consumer (orders.consumers) takes up to this many messages from
# the broker at once, and waits at most this long for a batch to fill.
SECKILL_CONFIRM_PREFETCH = env_int("SECKILL_CONFIRM_PREFETCH", 2000)
SECKILL_CONFIRM_LINGER_MS = env_int("SECKILL_CONFIRM_LINGER_MS", 20)
SECKILL_CONFIRM_CONSUMER = env_bool("SECKILL_CONFIRM_CONSUMER", True)
# Reservations per message when several travel together (orphan sweep).
SECKILL_MESSAGE_CHUNK = env_int("SECKILL_MESSAGE_CHUNK", 100)
# The purchase path's publish must be confirmed within this long after the
# reserve, or the request answers 503 and the reservation is undone (and
# tombstoned in MySQL in case the broker stored it after all).
SECKILL_PUBLISH_BUDGET_MS = env_int("SECKILL_PUBLISH_BUDGET_MS", 2000)
# The orphan sweep republishes at most this many reservations per SKU per run,
# and waits longer between two republishes of the same one as it ages (capped).
SECKILL_ORPHAN_SWEEP_CAP = env_int("SECKILL_ORPHAN_SWEEP_CAP", 2000)
SECKILL_ORPHAN_MAX_WAIT_SECONDS = env_int("SECKILL_ORPHAN_MAX_WAIT_SECONDS", 300)
# Lifetimes of the Redis markers (README, "State stays bounded"):
# - applied gives/freezes/repairs and released reservations: the longest
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
# Demo users (seed_demo) exist only where a settings module allows them.
SECKILL_DEMO_USERS = False

# --- Celery over RabbitMQ ------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
CELERY_TASK_SIGNING_KEY = os.environ.get("SECKILL_TASK_SIGNING_KEY", "")
CELERY_QUEUE = os.environ.get("SECKILL_QUEUE", "seckill")
CELERY_DEAD_LETTER_QUEUE = CELERY_QUEUE + ".dead"
# Queue arguments can never change once a queue exists (RabbitMQ refuses the
# declaration), so the task queue keeps the limit it was created with.
CELERY_DELIVERY_LIMIT = env_int("SECKILL_DELIVERY_LIMIT", 5)
SECKILL_CONFIRM_QUEUE = CELERY_QUEUE + ".confirm"
# The bulk confirm consumer holds many messages at once; each worker crash
# counts a delivery for every one of them, so its limit leaves room for a few.
SECKILL_CONFIRM_DELIVERY_LIMIT = env_int("SECKILL_CONFIRM_DELIVERY_LIMIT", 20)
_dead_letter_exchange = Exchange(CELERY_QUEUE + ".dlx", type="direct", durable=True)
CELERY_TASK_QUEUES = [
    Queue(
        CELERY_QUEUE,
        Exchange(CELERY_QUEUE, type="direct", durable=True),
        routing_key=CELERY_QUEUE,
        durable=True,
        queue_arguments={
            # Quorum queues count deliveries; past the limit RabbitMQ hands the
            # message to the dead-letter exchange instead of looping forever.
            "x-queue-type": "quorum",
            "x-delivery-limit": CELERY_DELIVERY_LIMIT,
            "x-dead-letter-exchange": _dead_letter_exchange.name,
            "x-dead-letter-routing-key": CELERY_DEAD_LETTER_QUEUE,
        },
    ),
]
CELERY_DEAD_LETTER = Queue(
    CELERY_DEAD_LETTER_QUEUE,
    _dead_letter_exchange,
    routing_key=CELERY_DEAD_LETTER_QUEUE,
    durable=True,
    queue_arguments={"x-queue-type": "quorum"},
)
CELERY_TASK_DEFAULT_QUEUE = CELERY_QUEUE
CELERY_TASK_DEFAULT_EXCHANGE = CELERY_QUEUE
CELERY_TASK_DEFAULT_ROUTING_KEY = CELERY_QUEUE
CELERY_TASK_DEFAULT_DELIVERY_MODE = "persistent"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task that raised is rejected without requeue, i.e. dead-lettered, not acked.
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = False
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# Large enough to fill a confirm batch (celery-batches flushes at 200 messages).
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("SECKILL_WORKER_PREFETCH", 64)
# Threads, not prefork: a confirm task is a few Redis and MySQL round trips, and
# prefork's per-task hand-off to a child process cost more CPU than the task.
CELERY_WORKER_POOL = os.environ.get("SECKILL_WORKER_POOL", "threads")
CELERY_WORKER_CONCURRENCY = env_int("SECKILL_WORKER_CONCURRENCY", 4)
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Every publisher waits for RabbitMQ's confirm, the purchase path included: the
# benchmark measured no gain from skipping it on this hardware (README,
# "Durability"). SECKILL_WEB_PUBLISH_CONFIRM=0 skips it on the purchase path,
# leaving the in-flight record in Redis (and the orphan sweep) as the only
# second copy until the broker has the message.
CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
SECKILL_WEB_PUBLISH_CONFIRM = env_bool("SECKILL_WEB_PUBLISH_CONFIRM", True)
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY = True
# Fail fast on the request path: a broken broker answers 503 within ~0.5 s.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.3,
}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
    # 4xx answers are the normal outcome of a sale (sold out, limit): not worth a log line each.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "django.request": {"level": "ERROR"}},
}


def derive_signing_key(secret: str, explicit: str) -> str:
    """The task HMAC key: explicit if given, else derived from the Django secret."""
    if explicit:
        return explicit
    return hashlib.sha256(("seckill-task-signing:" + secret).encode()).hexdigest()
