"""Test runs: the same real servers, a test database and a Redis db of its own."""
import os

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
os.environ.setdefault("SECKILL_QUEUE", "seckill-test")
os.environ.setdefault("DATABASE_URL", "mysql://root:@127.0.0.1:3306/seckill")

from .base import *  # noqa: E402,F401,F403
from .base import derive_signing_key  # noqa: E402

SECRET_KEY = SECRET_KEY or "test-secret-key"  # noqa: F405
CELERY_TASK_SIGNING_KEY = derive_signing_key(SECRET_KEY, CELERY_TASK_SIGNING_KEY)  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SECKILL_DEMO_USERS = True
