"""Celery tasks of governance: take ids, load, call one service."""

from celery import shared_task

from governance.schema_analysis import schema_analysis_run


@shared_task(name="governance.analyse_schema", ignore_result=True)
def analyse_schema(connection_id: int) -> None:
    schema_analysis_run(connection_id=connection_id)
