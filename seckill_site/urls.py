from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

from core.api import openapi_document, schema_view
from inventory.api import declarations as inventory_api, urls as inventory_urls
from orders.api import declarations as order_api, urls as order_urls
from reconciliation import views as reconciliation_views
from seckill_site.webserver import API_PREFIX


def api_document() -> dict:
    """/api/schema/: rendered from the operations the apps declare, the same
    declarations their handlers check requests with."""
    spec = settings.SPECTACULAR_SETTINGS
    return openapi_document(
        [*(op for op in order_urls.SERVED if op in order_api.operations_published()), *inventory_api.OPERATIONS],
        prefix=API_PREFIX,
        components={**order_api.COMPONENTS, **inventory_api.COMPONENTS},
        info={"title": spec["TITLE"], "version": spec["VERSION"], "description": spec["DESCRIPTION"]})


urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(reconciliation_views.dashboard), name="stock-dashboard"),
    path("admin/dashboard/data.json", admin.site.admin_view(reconciliation_views.dashboard_data),
         name="stock-dashboard-data"),
    path("admin/", admin.site.urls),
    path(API_PREFIX[1:], include(order_urls)),
    path(API_PREFIX[1:], include(inventory_urls)),
    path("api/schema/", schema_view(api_document), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/docs/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("reconciliation/", include("reconciliation.urls")),
]

if settings.SECKILL_BENCH_ENDPOINTS:
    # The benchmark's MySQL-only comparison path (and its baseline, in
    # orders.api.urls); off unless asked for, and never in production.
    urlpatterns.append(path(API_PREFIX[1:], include("benchmarks.naive")))
