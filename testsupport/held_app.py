"""The project's WSGI application, as a test server serves it, with one thing
added: a request carrying `X-Test-Hold: <seconds>` waits that long inside
whichever gate admitted it (the purchase path's, or a probe's) before Django
sees it, and first writes a line to the file named by SECKILL_TEST_HOLD_LOG.
So a test holds a probe's slots for as long as it needs, without pausing a
shared server or locking a row there (`start_web(target=TARGET)`)."""
from __future__ import annotations

import os
import time

from seckill_site.wsgi import application

TARGET = "testsupport.held_app:application"


class _Held:
    def __init__(self, handler):
        self.handler = handler

    def __call__(self, environ, start_response):
        hold = environ.get("HTTP_X_TEST_HOLD")
        if hold:
            with open(os.environ["SECKILL_TEST_HOLD_LOG"], "a") as log:
                log.write(f"{environ.get('PATH_INFO')}\n")
            time.sleep(float(hold))
        return self.handler(environ, start_response)


# The gate runs in Application.__call__ and hands the request to one of these.
application.api = _Held(application.api)
application.site = _Held(application.site)
