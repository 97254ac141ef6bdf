"""WSGI entry point: `gunicorn seckill_site.wsgi:application`."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "seckill_site.settings.local")
# The web process publishes reservations without waiting for a publisher
# confirm; see orders.services.order_place and README "Durability of an accepted
# reservation" for why that keeps every accepted reservation safe.
os.environ.setdefault("SECKILL_PROCESS_ROLE", "web")

application = get_wsgi_application()
