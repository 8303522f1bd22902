"""The demo playbook seed_demo adds (governance's `demo_seeded` signal): a
weekly order check over the demo database owned by `staff`, scheduled, and
run once at once so a newcomer finds a run history on the playbook screens
(the embedded profile runs no beat; the production profile's beat runs the
schedule)."""

from __future__ import annotations

import logging

from django.utils.translation import gettext as _

logger = logging.getLogger(__name__)

DEMO_NAME = "주간 주문 점검"


def seed_demo_playbook(sender, *, users, connection, chat_model, **kwargs) -> str:
    from playbooks.models import Playbook
    from playbooks.runs import playbook_run_start
    from playbooks.schedules import schedule_set
    from playbooks.services import playbook_create

    staff = users["staff"]
    if chat_model is None or Playbook.objects.filter(owner=staff, name=DEMO_NAME).exists():
        return ""
    playbook = playbook_create(
        owner=staff,
        name=DEMO_NAME,
        description="매주 월요일 09:00 (Asia/Seoul): 상품별 주문 수를 세고 요약합니다.",
        model=chat_model,
        parameters=[{"name": "top", "label": "상위 몇 개", "kind": "number", "required": False, "default": "5"}],
        nodes=[
            {
                "key": "orders",
                "kind": "tool",
                "tool": "run_sql",
                "arguments": {
                    "connection": connection.name,
                    "sql": "SELECT product, COUNT(*) AS orders FROM orders GROUP BY product "
                    "ORDER BY orders DESC LIMIT $top",
                },
            },
            {"key": "summary", "kind": "agent", "prompt": "이번 주 주문 현황을 요약해 주세요:\n$orders"},
        ],
        actor=staff,
    )
    schedule_set(playbook=playbook, kind="cron", cron="0 9 * * 1", tz="Asia/Seoul", parameters={}, actor=staff)
    playbook_run_start(playbook=playbook, actor=staff, parameters={})
    return _("Demo playbook %(name)s added (scheduled, run once).") % {"name": DEMO_NAME}
