from django.conf import settings

from core.api import routes
from orders.api import declarations as api, lean, views, webhook

# Each declared operation and its handler; any other method is 405.
HANDLERS = {
    api.PLACE: lean.place,
    api.LIST: views.OrderListView.as_view(),
    api.DETAIL: views.OrderDetailView.as_view(),
    api.PAY: lean.pay,
    api.CANCEL: lean.cancel,
    api.WEBHOOK: webhook.webhook,
}
if settings.SECKILL_BENCH_ENDPOINTS:
    # The benchmark's baseline: a purchase's checks without the take. Served
    # (and in the schema) only where the benchmark asks for it; the production
    # settings refuse the flag.
    HANDLERS[api.BASELINE] = lean.baseline
# What /api/schema/ describes: the operations served here.
SERVED = tuple(op for op in api.OPERATIONS if op in HANDLERS)
urlpatterns = routes(HANDLERS)
