"""Production: everything from the environment, and no default secret."""
from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F401,F403
from .base import derive_signing_key

if not SECRET_KEY or SECRET_KEY.startswith("dev-only") or len(SECRET_KEY) < 32:  # noqa: F405
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set to a real secret (32+ characters).")
CELERY_TASK_SIGNING_KEY = derive_signing_key(SECRET_KEY, CELERY_TASK_SIGNING_KEY)  # noqa: F405
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)  # noqa: F405
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
