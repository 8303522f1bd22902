from django.urls import path

from sharing import views

app_name = "sharing"

urlpatterns = [
    path(
        "api/conversations/<uuid:conversation_id>/share-links/",
        views.conversation_share_links,
        name="conversation-share-links",
    ),
    path("api/share-links/", views.share_links, name="share-links"),
    path("api/share-links/<uuid:link_id>/", views.share_link_detail, name="share-link-detail"),
    path("api/shared/<str:key>/", views.shared_conversation, name="shared-api"),
    path("api/shared/<str:key>/reveal/", views.shared_reveal, name="shared-reveal"),
    path("api/shared/<str:key>/fork/", views.shared_fork, name="shared-fork"),
    path("shared/<str:key>/", views.shared_page, name="shared-page"),
    path("shared-links/page.json", views.chat_page_text, name="page-text"),
    path("shared-links/", views.share_links_page, name="links-page"),
    path("shared-links/<uuid:link_id>/revoke/", views.share_links_page_revoke, name="links-page-revoke"),
]
