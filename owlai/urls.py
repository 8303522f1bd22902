from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _

# The admin is OwlAI's, not a generic "Django administration".
admin.site.site_header = _("OwlAI administration")
admin.site.site_title = _("OwlAI admin")
admin.site.index_title = _("Governance and audit")

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("", include("chat.urls")),
]
