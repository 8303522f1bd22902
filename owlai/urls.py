from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from accounts.views import set_language
from owlai import health, metrics

# The admin is OwlAI's, not a generic "Django administration".
admin.site.site_header = _("OwlAI administration")
admin.site.site_title = _("OwlAI admin")
admin.site.index_title = _("Governance and audit")

urlpatterns = [
    # Operations (owlai.health): token or allowed network only.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # The switcher: Django's, plus the signed-in user's choice is stored.
    path("i18n/setlang/", set_language, name="set_language"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/schema/swagger-ui/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-swagger-ui"),
    path("api/schema/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("", include("accounts.urls")),
    path("", include("chat.urls")),
    path("", include("agentapi.urls")),
    path("", include("sharing.urls")),
    path("", include("feedback.urls")),
    path("", include("playbooks.urls")),
]

# The 500 page rendered with the request (language, switcher): accounts.views.
handler500 = "accounts.views.server_error"
