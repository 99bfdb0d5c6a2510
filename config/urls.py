from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config.health import healthz, healthz_live, healthz_ready

# The Django admin site is the platform admins' ("Platform admin" in the portal's header).
admin.site.site_header = _("GPU Portal administration")
admin.site.site_title = _("GPU Portal admin")
admin.site.index_title = _("Platform administration")

api_v1 = [
    path("", include("accounts.urls")),
    path("", include("quotas.urls")),
    path("", include("clusters.urls")),
    path("", include("jobs.urls")),
    path("", include("tensorboards.urls")),
    path("", include("models_registry.urls")),
    path("", include("serving.urls")),
    path("", include("images.urls")),
    path("", include("webhooks.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI with the CSP nonce on its inline script and style (frontend/templates/frontend/api_docs/).
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema", template_name="frontend/api_docs/swagger_ui.html"),
        name="api-docs",
    ),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("healthz/ready", healthz_ready, name="healthz-ready"),
    path("healthz/live", healthz_live, name="healthz-live"),
    path("metrics", include("config.metrics.urls")),
    path("api/v1/", include(api_v1)),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["frontend"]), name="javascript-catalog"),
    path("tensorboard/", include("tensorboards.proxy")),
    path("tensorboards/", include("tensorboards.urls_ui")),  # the portal's page of a comparison board
    path("serve/", include("serving.router")),
    path("deployments/", include("serving.urls_ui")),
    path("models/", include("models_registry.urls_ui")),
    path("images/", include("images.urls_ui")),
    path("", include("frontend.urls")),
]

# Under /api/ and /serve/ errors are JSON {"detail": ...}; pages get the portal's own (config/errors.py).
handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"

if settings.PORTAL_BENCH:  # bench/api.py's bare view; never mounted in production
    urlpatterns.append(path("bench/", include("config.bench_urls")))
