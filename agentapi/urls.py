from django.urls import path

from agentapi import openai_views, views

app_name = "agentapi"

urlpatterns = [
    path("api/agent/turns/", views.turn_create, name="turns"),
    path("api/agent/turns/<int:turn_id>/events/", views.turn_events, name="turn-events"),
    path("api/agent/turns/<int:turn_id>/stream/", views.turn_stream, name="turn-stream"),
    path("api/agent/turns/<int:turn_id>/stop/", views.turn_stop, name="turn-stop"),
    path("api/agent/approvals/<uuid:approval_id>/", views.approval_decide, name="approval-decide"),
    # OpenAI-compatible facade (agentapi.openai_views): a client's base URL is <host>/v1.
    path("v1/models", openai_views.ModelsView.as_view(), name="openai-models"),
    path("v1/chat/completions", openai_views.ChatCompletionsView.as_view(), name="openai-chat-completions"),
]
