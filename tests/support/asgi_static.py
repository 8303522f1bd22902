"""The production ASGI application plus static files, for browser tests.

the tests' daphne runs without collectstatic (production serves STATIC_ROOT
through whitenoise: README);
the browser needs the page's scripts and styles. Django's own static handler
answers /static/ requests and passes everything else, websockets included,
to owlai.asgi unchanged (what `manage.py runserver --insecure` does)."""

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

from owlai.asgi import application as owlai_application

application = ASGIStaticFilesHandler(owlai_application)
