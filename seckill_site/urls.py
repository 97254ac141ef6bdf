from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from inventory.api import urls as inventory_urls
from orders.api import urls as order_urls
from reconciliation import views as reconciliation_views

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(reconciliation_views.dashboard), name="stock-dashboard"),
    path("admin/dashboard/data.json", admin.site.admin_view(reconciliation_views.dashboard_data), name="stock-dashboard-data"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(order_urls)),
    path("api/v1/", include(inventory_urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/docs/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("reconciliation/", include("reconciliation.urls")),
]

if settings.SECKILL_BENCH_ENDPOINTS:
    # The benchmark's MySQL-only comparison path; off unless asked for.
    urlpatterns.append(path("api/v1/", include("benchmarks.naive")))
