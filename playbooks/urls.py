from django.urls import path

from playbooks import pages, views

app_name = "playbooks"

urlpatterns = [
    path("playbooks/", pages.playbook_list, name="list"),
    path("playbooks/<int:playbook_id>/", pages.playbook_page, name="page"),
    path("playbooks/runs/<int:run_id>/", pages.run_page, name="run-page"),
    path("playbooks/runs/<int:run_id>/<str:action>/", pages.run_action, name="run-action"),
    path("api/playbooks/", views.playbooks, name="playbooks"),
    path("api/playbooks/from-turn/", views.playbook_from_turn_view, name="from-turn"),
    path("api/playbooks/<int:playbook_id>/", views.playbook_detail, name="detail"),
    path("api/playbooks/<int:playbook_id>/runs/", views.playbook_runs, name="runs"),
    path("api/playbook-runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("api/playbook-runs/<int:run_id>/stop/", views.run_stop, name="run-stop"),
    path("api/playbook-runs/<int:run_id>/rerun/", views.run_rerun, name="run-rerun"),
    path("api/playbook-notices/", views.notices, name="notices"),
]
