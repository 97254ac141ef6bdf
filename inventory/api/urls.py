from django.urls import path

from inventory.api import views

urlpatterns = [
    path("skus", views.SkuListView.as_view(), name="skus"),
    path("skus/<str:sku_id>", views.SkuDetailView.as_view(), name="sku-detail"),
    path("health", views.HealthView.as_view(), name="health"),
]
