from django.urls import path

from orders.api import views

urlpatterns = [
    path("orders", views.OrderListCreateView.as_view(), name="orders"),
    path("orders/<str:order_id>", views.OrderDetailView.as_view(), name="order-detail"),
    path("orders/<str:order_id>/pay", views.OrderPayView.as_view(), name="order-pay"),
    path("orders/<str:order_id>/cancel", views.OrderCancelView.as_view(), name="order-cancel"),
    path("baseline", views.BaselineView.as_view(), name="baseline"),
]
