from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("api/tokens/", views.api_tokens, name="api-tokens"),
    path("api/tokens/<int:token_id>/", views.api_token_detail, name="api-token-detail"),
    path("favicon.ico", views.favicon, name="favicon"),
]
