"""Celery tasks of governance: take ids, load, call one service."""

import logging

from celery import shared_task

from governance.schema_analysis import schema_analysis_run

logger = logging.getLogger(__name__)


@shared_task(name="governance.analyse_schema", ignore_result=True)
def analyse_schema(connection_id: int) -> None:
    schema_analysis_run(connection_id=connection_id)


@shared_task(name="governance.sync_connector_tools", ignore_result=True)
def sync_connector_tools() -> None:
    # Imported here: the MCP SDK is loaded only by the workers that sync.
    from governance.connectors.services import connectors_sync_all

    outcome = connectors_sync_all()
    failed = {name: error for name, error in outcome.items() if error != "ok"}
    if failed:
        logger.warning("connector tool sync: %d of %d failed", len(failed), len(outcome))
