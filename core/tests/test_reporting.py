"""No secret in what the project writes about an error: a 500's report (mailed
to ADMINS, and printed to the log by the console mail backend) hides URL
credentials and webhooks as well as the settings Django hides by name."""
from __future__ import annotations

import sys

from django.test import RequestFactory, override_settings
from django.views.debug import ExceptionReporter


@override_settings(CELERY_BROKER_URL="amqp://seckill:brokerPW1@mq.internal:5672//",
                   CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache",
                                       "LOCATION": "redis://:redisPW2@cache.internal:6379/0"}},
                   SECKILL_ALERT_WEBHOOK="https://hooks.example.com/services/T0/B0/hookPW3",
                   SECKILL_METRICS_TOKEN="metricsPW4")
def test_an_error_report_carries_no_secret_of_the_settings():
    request = RequestFactory().get("/boom", HTTP_AUTHORIZATION="Token tokenPW5")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        text = ExceptionReporter(request, *sys.exc_info()).get_traceback_text()
    assert "CELERY_BROKER_URL" in text and "mq.internal" in text  # the report still says where
    for secret in ("brokerPW1", "redisPW2", "hookPW3", "metricsPW4", "tokenPW5"):
        assert secret not in text, secret
