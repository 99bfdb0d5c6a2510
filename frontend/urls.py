from django.contrib.auth import views as auth_views
from django.urls import include, path

from frontend import views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("console/", include("frontend.urls_console")),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/new/sizing/", views.job_new_sizing, name="job-new-sizing"),
    path("jobs/new/preview/", views.job_new_preview, name="job-new-preview"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("jobs/<int:job_id>/register/", views.job_register_version, name="job-register-version"),
    path("jobs/cancel/", views.job_bulk_cancel, name="job-bulk-cancel"),
    path("queue/", views.queue, name="queue"),
    path("clusters/", views.cluster_list, name="cluster-list"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster-detail"),
    path("tokens/", include("frontend.tokens")),
]
