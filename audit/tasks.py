"""Scheduled audit jobs (Celery beat; see CELERY_BEAT_SCHEDULE in settings)."""

from __future__ import annotations

import logging

from celery import shared_task

from audit.digest import seal_new_rows
from audit.retention import purge_expired

logger = logging.getLogger(__name__)


@shared_task(name="audit.seal_new_rows", ignore_result=True)
def seal_new_rows_task() -> None:
    digests = seal_new_rows()
    if digests:
        logger.info("sealed %d audit range(s)", len(digests))


@shared_task(name="audit.purge_expired", ignore_result=True)
def purge_expired_task() -> None:
    deleted = purge_expired()
    logger.info("audit retention purge: %s", deleted)
