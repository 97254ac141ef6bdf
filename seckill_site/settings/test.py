"""Test runs: local settings against the same real servers, with a test
database, a Redis db and queues of their own."""
import os

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
os.environ.setdefault("SECKILL_QUEUE", "seckill-test")
os.environ.setdefault("DATABASE_URL", "mysql://root:@127.0.0.1:3306/seckill")
# The benchmark's endpoints too: the tests hold the baseline to the purchase's
# checks (and the web servers they start inherit this).
os.environ.setdefault("SECKILL_BENCH_ENDPOINTS", "1")

from .local import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
