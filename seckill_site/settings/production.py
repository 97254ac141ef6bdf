"""Production: everything from the environment, no default secret, no loopback
or guest default, and `manage.py check --deploy` clean."""
import os

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .env import env_bool, env_int

REQUIRED = ("DJANGO_SECRET_KEY", "SECKILL_TASK_SIGNING_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")
_missing = [name for name in REQUIRED if not os.environ.get(name, "").strip()]
if _missing:
    raise ImproperlyConfigured(f"production settings need {', '.join(_missing)} in the environment "
                               f"(docs/operations.md, 'Deploying'); nothing falls back to a default here.")
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith(("dev-only", "django-insecure")):  # noqa: F405
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be a real secret of 50 or more characters.")
if len(SECKILL_TASK_SIGNING_KEY) < 32 or SECKILL_TASK_SIGNING_KEY == SECRET_KEY:  # noqa: F405
    raise ImproperlyConfigured("SECKILL_TASK_SIGNING_KEY must be a secret of 32 or more characters, "
                               "other than DJANGO_SECRET_KEY.")
# The webhook is optional (unset: it answers 404), but a secret that is set
# must be one: long enough not to be guessed, and not another key reused.
_webhook_secret = SECKILL_PAYMENT_WEBHOOK_SECRET  # noqa: F405
if _webhook_secret and (len(_webhook_secret) < 32 or _webhook_secret in (SECRET_KEY, SECKILL_TASK_SIGNING_KEY)):  # noqa: F405
    raise ImproperlyConfigured("SECKILL_PAYMENT_WEBHOOK_SECRET, when set, must be a secret of 32 or more "
                               "characters, other than DJANGO_SECRET_KEY and SECKILL_TASK_SIGNING_KEY.")
# Payments come from the provider's signed webhook. The buyer's own POST pay
# marks any order paid on the buyer's word: here it is an opt-in for a demo,
# and with it off the webhook is the only way an order is ever paid.
SECKILL_BUYER_PAY = env_bool("SECKILL_BUYER_PAY", False)
if not SECKILL_BUYER_PAY and not _webhook_secret:
    raise ImproperlyConfigured("SECKILL_PAYMENT_WEBHOOK_SECRET is not set and SECKILL_BUYER_PAY is off: nothing "
                               "could pay an order. Set the webhook secret shared with the payment provider "
                               "(docs/operations.md, 'Payments from a provider'), or SECKILL_BUYER_PAY=1 for a "
                               "demo where any buyer may mark an order paid.")
if "guest:guest@" in CELERY_BROKER_URL:  # noqa: F405
    raise ImproperlyConfigured("CELERY_BROKER_URL uses RabbitMQ's guest account; give the broker a user of its own.")
if SECKILL_BENCH_ENDPOINTS:  # noqa: F405
    raise ImproperlyConfigured("SECKILL_BENCH_ENDPOINTS is for the benchmark (local settings): production serves "
                               "no benchmark endpoint.")
if DEBUG:  # noqa: F405
    raise ImproperlyConfigured("DJANGO_DEBUG must be off in production.")
# Read by the start-up checks (core.apps) and the URL conf: what only a
# production deployment refuses or warns about.
SECKILL_PRODUCTION = True

# Behind a proxy that terminates TLS; the health check stays reachable over
# plain HTTP for the container probes.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
