from django.urls import path

from playbooks.consumers import RunConsumer

websocket_urlpatterns = [
    path("ws/playbook-runs/<int:run_id>/", RunConsumer.as_asgi()),
]
