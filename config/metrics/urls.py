from django.urls import path

from config.metrics.views import metrics

urlpatterns = [path("", metrics, name="metrics")]
