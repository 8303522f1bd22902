from django.urls import path

from feedback import views

app_name = "feedback"

urlpatterns = [
    path("feedback/page.json", views.chat_page_text, name="page-text"),
    path("api/feedback/tags/", views.feedback_tags, name="tags"),
    path(
        "api/conversations/<uuid:conversation_id>/feedback/", views.conversation_feedback, name="conversation-feedback"
    ),
    path(
        "api/conversations/<uuid:conversation_id>/turns/<int:turn_id>/feedback/",
        views.turn_feedback,
        name="turn-feedback",
    ),
]
