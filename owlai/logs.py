"""Logs an operator can search: every record carries the id of the HTTP
request (`request_id`) and of the run (`run_id`, the turn's id) it was
written for, and with OWLAI_LOG_FORMAT=json every line is one JSON object
(python-json-logger) with time, level, logger, message, process, thread,
those ids and a traceback when there is one.

- `RequestIdMiddleware`: a request's id is its X-Request-ID header when that
  looks like an id (a proxy's or a load balancer's), else a new one; the
  response names it in X-Request-ID.
- `run_context(turn_id)`: the runner sets the run id while a turn runs
  (chat.turns.runner), so a worker's lines of one turn can be found together.
- `ContextFilter` (on the console handler, settings.LOGGING) copies both
  onto every record; Celery's own handlers get the same (owlai.celery).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("owlai_request_id", default="")
run_id: contextvars.ContextVar[str] = contextvars.ContextVar("owlai_run_id", default="")

_INCOMING_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
JSON_FIELDS = "{asctime}{levelname}{name}{message}{process}{threadName}"


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        record.run_id = run_id.get()
        return True


def json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        JSON_FIELDS,
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger", "threadName": "thread"},
    )


def use_on(logger: logging.Logger, *, as_json: bool) -> None:
    """The ids on every handler of `logger` (and JSON lines, `as_json`):
    for handlers configured elsewhere (Celery's)."""
    for handler in logger.handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        if as_json:
            handler.setFormatter(json_formatter())


@contextlib.contextmanager
def run_context(turn_id: int):
    token = run_id.set(str(turn_id))
    try:
        yield
    finally:
        run_id.reset(token)


def _incoming(request) -> str:
    given = request.headers.get("X-Request-ID", "")
    return given if _INCOMING_ID.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Sync and async: under daphne it runs on the event loop, no thread hop."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        token = request_id.set(_incoming(request))
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id.get()
            return response
        finally:
            request_id.reset(token)

    async def _acall(self, request):
        token = request_id.set(_incoming(request))
        try:
            response = await self.get_response(request)
            response["X-Request-ID"] = request_id.get()
            return response
        finally:
            request_id.reset(token)
