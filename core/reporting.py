"""What may be written about a secret: URLs shown without their credentials,
and error reports that hide every secret-bearing setting.

Error reports matter here because they reach a log: Django mails ADMINS a
report with the settings on every 500, and without an SMTP server the mail
backend is the console. Django's own filter hides settings by name (KEY,
SECRET, PASS, TOKEN ...) but not a password inside a URL (CELERY_BROKER_URL,
the Redis LOCATION of CACHES) nor a webhook whose path is its secret.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.views.debug import SafeExceptionReporterFilter

_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]*@", re.IGNORECASE)


def url_redacted(url: str) -> str:
    """Scheme, host and port only: a webhook URL's path and query are often
    its secret (Slack, Teams), and userinfo is a password."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparsable URL>"
    if not parts.scheme or not host:
        return "<unparsable URL>"
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def credentials_hidden(text: str) -> str:
    """Every `scheme://user:password@` in a text as `scheme://***@`."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


class SecretsReporterFilter(SafeExceptionReporterFilter):
    """Django's filter, also hiding webhooks and the credentials of any URL
    (DEFAULT_EXCEPTION_REPORTER_FILTER)."""

    hidden_settings = re.compile("API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|WEBHOOK", flags=re.I)

    def cleanse_setting(self, key, value):
        value = super().cleanse_setting(key, value)
        if isinstance(value, str) and "://" in value:
            return credentials_hidden(value)
        return value
