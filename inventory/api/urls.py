from core.api import routes
from inventory.api import declarations as api, views

# Each declared operation and its handler; any other method is 405.
urlpatterns = routes({
    api.SKU_LIST: views.SkuListView.as_view(),
    api.SKU_DETAIL: views.SkuDetailView.as_view(),
    api.HEALTH: views.HealthView.as_view(),
})
