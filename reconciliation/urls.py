from django.urls import path

from reconciliation import views

app_name = "reconciliation"
urlpatterns = [
    path("", views.report, name="report"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("metrics", views.metrics, name="metrics"),
]
