"""Developer machine and the one-command demo: loopback servers, a fixed dev
secret, demo users."""
from .base import *  # noqa: F403
from .env import derive_signing_key

SECRET_KEY = SECRET_KEY or "dev-only-insecure-secret-key-change-me"  # noqa: F405
SECKILL_TASK_SIGNING_KEY = SECKILL_TASK_SIGNING_KEY or derive_signing_key(SECRET_KEY)  # noqa: F405
# seed_demo may create the demo users (ops/ops, support/support, a demo buyer)
# and an admin with the default password; nowhere else.
SECKILL_DEMO_USERS = True
