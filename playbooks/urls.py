from django.urls import path

from playbooks import forms_pages, pages, views

app_name = "playbooks"

urlpatterns = [
    path("playbooks/", pages.playbook_list, name="list"),
    path("playbooks/page.json", pages.chat_page_text, name="page-text"),
    path("playbooks/new/", forms_pages.playbook_new, name="new"),
    path("playbooks/new-from-turn/", forms_pages.playbook_new_from_turn, name="new-from-turn"),
    path("playbooks/<int:playbook_id>/", pages.playbook_page, name="page"),
    path("playbooks/<int:playbook_id>/share/", forms_pages.playbook_share_page, name="share"),
    path("playbooks/<int:playbook_id>/schedules/", forms_pages.schedule_add, name="schedule-add"),
    path(
        "playbooks/<int:playbook_id>/schedules/<int:schedule_id>/delete/",
        forms_pages.schedule_remove,
        name="schedule-delete",
    ),
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
