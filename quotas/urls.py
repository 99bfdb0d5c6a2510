from django.urls import path

from quotas import api

urlpatterns = [
    path("priority-classes/", api.PriorityClassListApi.as_view(), name="api-priority-classes"),
    path("quota-loans/", api.QuotaLoanListApi.as_view(), name="api-quota-loans"),
    path("quota-loans/<int:loan_id>/", api.QuotaLoanDetailApi.as_view(), name="api-quota-loan-detail"),
]
