"""The framework's floor: a bare Django view (no DRF, no middleware, no
authentication) returning a small JSON body, for the benchmark's second
baseline. Served by the same gunicorn settings as the real site:

    gunicorn benchmarks.floor:application
"""
import os

os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.floor"

from django.http import JsonResponse
from django.urls import path

# Settings: this module is its own settings module and URLconf.
SECRET_KEY = "floor-benchmark-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "benchmarks.floor"
USE_TZ = True


def floor(request):
    return JsonResponse({"order_id": "", "status": "FLOOR"}, status=202)


urlpatterns = [path("floor", floor)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
