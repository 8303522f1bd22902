from django.urls import path

from chat import reference_views, views

app_name = "chat"

urlpatterns = [
    path("", views.chat_page, name="page"),
    path("api/conversations/", views.conversations, name="conversations"),
    path("api/models/", views.models_for_new_conversation, name="models"),
    path("api/conversations/<uuid:conversation_id>/models/", views.conversation_models, name="conversation-models"),
    path("api/conversations/<uuid:conversation_id>/", views.conversation_detail, name="conversation-detail"),
    path("api/conversations/<uuid:conversation_id>/reveal/", views.conversation_reveal, name="conversation-reveal"),
    path(
        "api/conversations/<uuid:conversation_id>/url-references/",
        reference_views.conversation_url_reference,
        name="conversation-url-reference",
    ),
    path(
        "api/conversations/<uuid:conversation_id>/mentions/", views.conversation_mentions, name="conversation-mentions"
    ),
    path(
        "api/conversations/<uuid:conversation_id>/messages/", views.conversation_messages, name="conversation-messages"
    ),
]
