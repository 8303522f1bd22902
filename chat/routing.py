from django.urls import path, re_path

from chat.consumers import ChatConsumer, ClosingConsumer

websocket_urlpatterns = [
    path("ws/chat/<uuid:conversation_id>/", ChatConsumer.as_asgi()),
    # Anything else: accepted and closed with 4404, never a 500 at the handshake.
    re_path(r"", ClosingConsumer.as_asgi()),
]
