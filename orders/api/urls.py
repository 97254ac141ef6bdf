from django.urls import path

from orders.api import views

urlpatterns = [
    path("orders", views.OrderListCreateView.as_view(), name="orders"),
    path("orders/<str:order_id>", views.OrderDetailView.as_view(), name="order-detail"),
    path("baseline", views.BaselineView.as_view(), name="baseline"),
]
