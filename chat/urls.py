from django.urls import path

from chat import approval_views, reference_views, views

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
    path("api/conversations/<uuid:conversation_id>/export/", views.conversation_export, name="conversation-export"),
    # Approvals of connector calls (chat.approvals).
    path("api/approvals/<uuid:approval_id>/", approval_views.approval_decide, name="approval-decide"),
    path("api/always-allowed/", approval_views.always_allowed, name="always-allowed"),
    path("api/always-allowed/<int:grant_id>/", approval_views.always_allowed_revoke, name="always-allowed-revoke"),
    path("always-allowed/", approval_views.always_allowed_page, name="always-allowed-page"),
    path(
        "always-allowed/<int:grant_id>/revoke/",
        approval_views.always_allowed_page_revoke,
        name="always-allowed-page-revoke",
    ),
]
