from core.api import routes
from orders.api import declarations as api
from orders.api import lean, views, webhook

# Each declared operation and its handler; any other method is 405.
urlpatterns = routes({
    api.PLACE: lean.place,
    api.LIST: views.OrderListView.as_view(),
    api.DETAIL: views.OrderDetailView.as_view(),
    api.PAY: lean.pay,
    api.CANCEL: lean.cancel,
    api.BASELINE: lean.baseline,
    api.WEBHOOK: webhook.webhook,
})
