"""OwlAI settings: one module, values from the environment.

No environment at all gives the embedded default: a SQLite file, the in-memory
channel layer and Celery tasks run in-process. ``DATABASE_URL`` (PostgreSQL) and
``REDIS_URL`` switch to the production profile. Bad values fail loudly here,
so every entry point (web, worker, manage.py) refuses to start the same way.
"""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from owlai.install_config import InstallConfigError, load_install_config, production_demo_problem

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

# Local state of the embedded profile (SQLite files, the demo company DB).
VAR_DIR = Path(env.str("OWLAI_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DEBUG", default=False)
EMBEDDED = not env.str("DATABASE_URL", default="")

if EMBEDDED:
    # The embedded profile is a local demo; a fixed key there is harmless and
    # lets `make run` work with nothing set. Production must set its own.
    SECRET_KEY = env.str("SECRET_KEY", default="owlai-embedded-demo-key-not-for-production")
else:
    SECRET_KEY = env.str("SECRET_KEY")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "rangefilter",  # date-time range filter of the audit screens
    "owlai.ops",  # sweep leases and process heartbeats (lowest layer)
    "accounts",
    "governance",
    "chat",
    "audit",
    "agentapi",
    "sharing",  # surfaces above chat
    "feedback",
    "django_celery_beat",  # playbook schedules: cron/interval periodic tasks in the database
    "playbooks",
]

MIDDLEWARE = [
    # Every log line of a request names its id (owlai.logs).
    "owlai.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (STATIC_ROOT, filled by collectstatic) from the app server
    # itself, daphne included: Django's ASGI handler runs this middleware too,
    # so no proxy configuration is needed for styles and scripts.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.middleware.UserLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "owlai.urls"
ASGI_APPLICATION = "owlai.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "governance.context_processors.admin_banners",
                "owlai.times.zone_context",
            ],
        },
    },
]

if EMBEDDED:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env.str("OWLAI_SQLITE_PATH", default=str(VAR_DIR / "owlai.sqlite3")),
            # Worker thread, heartbeat thread and web thread share the file:
            # wait instead of failing, and take the write lock when a
            # transaction begins (IMMEDIATE), so two deferred transactions
            # can never deadlock on upgrading their read locks, which SQLite
            # reports at once as "database is locked" without waiting.
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    }
else:
    DATABASES = {"default": env.db("DATABASE_URL")}
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://...)")
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # The executor's per-call grant lookup runs as a server-side prepared
    # statement (planning it cost more than running it). Django's own cursors
    # bind on the client and never prepare whatever this says; the threshold
    # only lets psycopg prepare what asks for it (prepare=True): None, Django's
    # default, would refuse even that. Turn off behind a connection pooler
    # that cannot keep prepared statements (PgBouncer < 1.21, transaction mode).
    OWLAI_PREPARED_STATEMENTS = env.bool("OWLAI_PREPARED_STATEMENTS", default=True)
    if OWLAI_PREPARED_STATEMENTS:
        DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
    # A connection pool per process (psycopg_pool, through Django): a thread
    # borrows a connection for its database work and gives it back instead of
    # opening one per task or request (a new PostgreSQL backend each time) or
    # keeping one per idle thread. Every session setting on the app database
    # is SET LOCAL, so nothing outlives the transaction that set it.
    OWLAI_DB_POOL_SIZE = env.int("OWLAI_DB_POOL_SIZE", default=0)
    if OWLAI_DB_POOL_SIZE < 0:
        raise ImproperlyConfigured("OWLAI_DB_POOL_SIZE must be 0 (off) or a number of connections")
    if OWLAI_DB_POOL_SIZE:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them; Django refuses both
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": OWLAI_DB_POOL_SIZE,
            "timeout": env.float("OWLAI_DB_POOL_TIMEOUT", default=10.0),
            "max_idle": 60,
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "ko"
LANGUAGES = [("ko", _("Korean")), ("en", _("English"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env.str("TIME_ZONE", default="Asia/Seoul")
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["owlai.formats"]  # one time format on every screen (owlai.times)

STATIC_URL = "static/"
# Where collectstatic gathers the files the app server serves (whitenoise).
STATIC_ROOT = Path(env.str("OWLAI_STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
LOGIN_URL = "login"
LOGOUT_REDIRECT_URL = "login"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    # Personal API tokens (accounts) first: without credentials the API then
    # answers 401 with a Bearer challenge; the browser uses its session.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Errors in the request's language, a token sent where none is accepted named as such.
    "EXCEPTION_HANDLER": "accounts.api_errors.api_exception_handler",
}

# OpenAPI 3 schema at /api/schema/, Swagger UI and Redoc from the sidecar's
# static files (no CDN). The websocket protocol, which OpenAPI cannot
# describe, is the description: README's section, so there is one text.
SPECTACULAR_SETTINGS = {
    "TITLE": "OwlAI API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": True,
    "SCHEMA_PATH_PREFIX": r"/api/",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # validatorUrl None: Swagger UI would otherwise load a badge from its online validator.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "PREPROCESSING_HOOKS": [],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "owlai.api_docs.add_websocket_protocol"],
}

# --- Channels / Celery -------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
OWLAI_CHANNEL_CAPACITY = env.int("OWLAI_CHANNEL_CAPACITY", default=1000)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis pub/sub: a group send is one PUBLISH, nothing of
            # the layer is kept in Redis; plus a bounded, counted queue per
            # socket and a resync after a Redis outage (chat/layers.py).
            "BACKEND": "chat.layers.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
                "prefix": env.str("OWLAI_CHANNEL_PREFIX", default="owlai"),
                # Messages waiting per socket in its process before more are
                # dropped. A drop costs the user nothing (the page resyncs
                # from the database) but is logged.
                "capacity": OWLAI_CHANNEL_CAPACITY,
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    if not EMBEDDED:
        raise ImproperlyConfigured("REDIS_URL is required when DATABASE_URL is set (production profile)")
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "chat.layers.InMemoryChannelLayer", "CONFIG": {"capacity": OWLAI_CHANNEL_CAPACITY}}
    }
    CELERY_BROKER_URL = "memory://"
    # In-process tasks: the embedded profile has no separate worker.
    CELERY_TASK_ALWAYS_EAGER = True

CELERY_TASK_DEFAULT_QUEUE = env.str("OWLAI_CELERY_QUEUE", default="owlai")
# Turn reliability (chat.services.turns_recover): a running turn renews its
# heartbeat every HEARTBEAT seconds; beat looks every RECOVERY seconds and
# fails running turns whose heartbeat is older than STALE seconds (so a lost
# worker's turn fails within STALE + RECOVERY), and enqueues a turn no worker
# claimed within QUEUE seconds once more, failing it QUEUE seconds later.
OWLAI_TURN_HEARTBEAT_SECONDS = env.float("OWLAI_TURN_HEARTBEAT_SECONDS", default=10.0)
OWLAI_TURN_STALE_SECONDS = env.float("OWLAI_TURN_STALE_SECONDS", default=45.0)
OWLAI_TURN_RECOVERY_SECONDS = env.float("OWLAI_TURN_RECOVERY_SECONDS", default=15.0)
OWLAI_TURN_QUEUE_SECONDS = env.float("OWLAI_TURN_QUEUE_SECONDS", default=120.0)
if OWLAI_TURN_STALE_SECONDS < 2 * OWLAI_TURN_HEARTBEAT_SECONDS:
    # One late heartbeat (a busy database) must not fail a healthy turn.
    raise ImproperlyConfigured("OWLAI_TURN_STALE_SECONDS must be at least twice OWLAI_TURN_HEARTBEAT_SECONDS")
# A turn's claim and its end wait this long for an application database that
# went away (a restart) before giving up (owlai.connection_health); then the
# recovery job ends the turn (STALE + RECOVERY).
OWLAI_TURN_END_RETRY_SECONDS = env.float("OWLAI_TURN_END_RETRY_SECONDS", default=30.0)
# Customer databases (governance.sql.execution_connect): connecting (TCP,
# login, session settings) takes at most CONNECT seconds; a call that has not
# answered MARGIN seconds past its connection's statement timeout is ended on
# our side (a server gone silent), and the server ends the session too.
OWLAI_CUSTOMER_DB_CONNECT_SECONDS = env.float("OWLAI_CUSTOMER_DB_CONNECT_SECONDS", default=3.0)
OWLAI_CUSTOMER_DB_MARGIN_SECONDS = env.float("OWLAI_CUSTOMER_DB_MARGIN_SECONDS", default=5.0)
if OWLAI_CUSTOMER_DB_CONNECT_SECONDS <= 0 or OWLAI_CUSTOMER_DB_MARGIN_SECONDS < 1:
    raise ImproperlyConfigured("OWLAI_CUSTOMER_DB_CONNECT_SECONDS must be positive, _MARGIN_SECONDS at least 1")
# Streamed text is stored and sent at most once per this many seconds.
OWLAI_DELTA_COALESCE_SECONDS = env.float("OWLAI_DELTA_COALESCE_SECONDS", default=0.05)
CELERY_TASK_ACKS_LATE = True
# How often beat fetches every connector's tool list (governance.sync_connector_tools).
OWLAI_CONNECTOR_SYNC_SECONDS = env.float("OWLAI_CONNECTOR_SYNC_SECONDS", default=3600.0)
CELERY_BEAT_SCHEDULE = {
    "audit-digest": {"task": "audit.seal_new_rows", "schedule": env.float("OWLAI_AUDIT_DIGEST_SECONDS", default=600.0)},
    "audit-retention": {"task": "audit.purge_expired", "schedule": 24 * 3600.0},
    "conversation-retention": {"task": "chat.purge_conversations", "schedule": 24 * 3600.0},
    # Expires: while no worker runs, rounds must not pile up in the queue.
    "turn-recovery": {
        "task": "chat.recover_turns",
        "schedule": OWLAI_TURN_RECOVERY_SECONDS,
        "options": {"expires": OWLAI_TURN_RECOVERY_SECONDS},
    },
    # Connector tool lists: what the AI may use changes when a server adds or
    # removes tools, so the lists are fetched (and changes recorded) on a schedule.
    "connector-tool-sync": {
        "task": "governance.sync_connector_tools",
        "schedule": OWLAI_CONNECTOR_SYNC_SECONDS,
        "options": {"expires": OWLAI_CONNECTOR_SYNC_SECONDS},
    },
    # Playbook pre-approvals past their expiry are recorded; runs whose
    # hand-over to the next step was lost go on (playbooks.tasks.sweep).
    "playbook-sweep": {
        "task": "playbooks.sweep",
        "schedule": env.float("OWLAI_PLAYBOOK_SWEEP_SECONDS", default=60.0),
        "options": {"expires": env.float("OWLAI_PLAYBOOK_SWEEP_SECONDS", default=60.0)},
    },
    # Approval requests nobody answered expire; their turns resume (chat.approvals).
    "approval-expiry": {
        "task": "chat.expire_approvals",
        "schedule": env.float("OWLAI_APPROVAL_SWEEP_SECONDS", default=10.0),
        "options": {"expires": env.float("OWLAI_APPROVAL_SWEEP_SECONDS", default=10.0)},
    },
}
# Notices to people (a playbook run that waits for their approval or failed):
# printed by default (the embedded profile); an SMTP backend in production.
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="owlai@localhost")
OWLAI_PLAYBOOK_SWEEP_SECONDS = env.float("OWLAI_PLAYBOOK_SWEEP_SECONDS", default=60.0)
# A run page follows its run over the run's websocket; it also reads the run
# this often while the run is active, in case a frame was lost.
OWLAI_PLAYBOOK_RUN_POLL_SECONDS = env.float("OWLAI_PLAYBOOK_RUN_POLL_SECONDS", default=20.0)
# Beat reads its schedule from the database (django-celery-beat): the static
# entries above are synced into it, playbook schedules are rows of it.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# No single point of failure (owlai.ops.sweeps): every worker looks every
# SWEEP_TICK seconds whether a sweep of the schedule above is due and runs it
# under a database lease, so sweeps go on with beat down and run once per
# period with two beats. Beat and workers write heartbeats read by /readyz
# (stale after 3 periods).
OWLAI_SWEEP_TICK_SECONDS = env.float("OWLAI_SWEEP_TICK_SECONDS", default=1.0)
OWLAI_WORKER_HEARTBEAT_SECONDS = env.float("OWLAI_WORKER_HEARTBEAT_SECONDS", default=10.0)
OWLAI_BEAT_HEARTBEAT_SECONDS = env.float("OWLAI_BEAT_HEARTBEAT_SECONDS", default=10.0)
# A worker told to stop (SIGTERM) hands its running turns to other workers at
# their next safe point; those still inside one call near the end of this
# grace period (the supervisor's stop timeout: systemd TimeoutStopSec,
# Kubernetes terminationGracePeriodSeconds) fail visibly (chat.turns.handover).
OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS = env.float("OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS", default=30.0)
# Run by one worker when the broker's Redis restarted (its run id changed).
OWLAI_BROKER_RESTART_TASK = "chat.requeue_after_broker_restart"
# /readyz and /metrics (owlai.health): a request passes with the bearer token
# OWLAI_OPS_TOKEN, or from an address in OWLAI_OPS_ALLOWED_NETWORKS
# (default loopback only). Everything else gets 403.
OWLAI_OPS_TOKEN = env.str("OWLAI_OPS_TOKEN", default="")
OWLAI_OPS_ALLOWED_NETWORKS = env.list("OWLAI_OPS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A Redis restart must not stop the worker: reconnect, forever, and do not
# cancel what is running (a turn in flight reports to the database anyway).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_keepalive": True, "retry_on_timeout": True, "health_check_interval": 10}

# --- Install config ----------------------------------------------------------
OWLAI_CONFIG_PATH = env.str("OWLAI_CONFIG", default=str(BASE_DIR / "owlai.example.toml"))
try:
    OWLAI_INSTALL = load_install_config(OWLAI_CONFIG_PATH)
except InstallConfigError as exc:
    raise ImproperlyConfigured(f"OwlAI install config: {exc}") from exc
# The example config's offline demo model must not reach a production
# install's users by default (the embedded demo keeps it).
if not EMBEDDED and (_demo_problem := production_demo_problem(OWLAI_INSTALL)):
    raise ImproperlyConfigured(f"OwlAI install config: {_demo_problem}")

# --- Audit trail ----------------------------------------------------------------
# Retention floor and value come from the install config (validated above).
OWLAI_RETENTION_DAYS = OWLAI_INSTALL.access_log_retention_days
# Key for the audit digest chain. It must live outside the database (a
# database superuser who can rewrite rows must not be able to re-sign them).
OWLAI_AUDIT_HMAC_KEY = env.str("OWLAI_AUDIT_HMAC_KEY", default="")
# Connection of the retention role (the only role that may delete audit rows,
# and only past retention). Empty: use the default connection (embedded).
OWLAI_RETENTION_DATABASE_URL = env.str("OWLAI_RETENTION_DATABASE_URL", default="")
# Production refuses to start when its database role could rewrite the audit
# trail (superuser, BYPASSRLS, member of the owner role, UPDATE/DELETE rights).
OWLAI_DB_ROLE_CHECK = env.bool("OWLAI_DB_ROLE_CHECK", default=not EMBEDDED)
# Behind a reverse proxy that sets X-Forwarded-For, trust it for the client
# IP recorded in audit events (otherwise anyone could forge it).
OWLAI_TRUST_X_FORWARDED_FOR = env.bool("OWLAI_TRUST_X_FORWARDED_FOR", default=False)
# Rows a CSV export of the audit screens may hold.
OWLAI_AUDIT_EXPORT_MAX_ROWS = 5000

# --- Agent and executor limits -------------------------------------------------
OWLAI_AGENT_MAX_STEPS = env.int("OWLAI_AGENT_MAX_STEPS", default=8)
OWLAI_TURN_TIMEOUT_SECONDS = env.int("OWLAI_TURN_TIMEOUT_SECONDS", default=600)
# The audit row keeps at most this many characters of SQL (flagged when cut).
OWLAI_AUDIT_SQL_MAX_CHARS = 10_000
# Websocket: a frame larger than this is refused with an `error` event.
OWLAI_WS_MAX_FRAME_BYTES = env.int("OWLAI_WS_MAX_FRAME_BYTES", default=64 * 1024)
OWLAI_MAX_MESSAGE_CHARS = env.int("OWLAI_MAX_MESSAGE_CHARS", default=8000)
# A tool result longer than this (characters of JSON) is spilled to a
# per-conversation file of masked values; the model gets a preview.
OWLAI_SPILL_CHARS = env.int("OWLAI_SPILL_CHARS", default=60_000)
OWLAI_SPILL_PREVIEW_ROWS = 50
# Conversation retention: purged this many days after the last
# activity, or after the owner deleted it (hidden, and its vault gone, at once).
OWLAI_CONVERSATION_IDLE_DAYS = env.int("OWLAI_CONVERSATION_IDLE_DAYS", default=365)
OWLAI_CONVERSATION_DELETED_DAYS = env.int("OWLAI_CONVERSATION_DELETED_DAYS", default=30)
if OWLAI_CONVERSATION_IDLE_DAYS < 1 or OWLAI_CONVERSATION_DELETED_DAYS < 1:
    # 0 would purge every conversation, running turns included.
    raise ImproperlyConfigured("OWLAI_CONVERSATION_IDLE_DAYS and OWLAI_CONVERSATION_DELETED_DAYS must be at least 1")
# Key for encrypting stored connection DSNs (Fernet, urlsafe base64, 32 bytes).
# Defaults to a key derived from SECRET_KEY; set it to rotate independently.
OWLAI_FIELD_KEY = env.str("OWLAI_FIELD_KEY", default="")

# Django's database sessions, read with a prepared statement (accounts.sessions).
SESSION_ENGINE = "accounts.sessions"

# OWLAI_LOG_FORMAT=json: one JSON object per line, with the request and run
# ids (owlai.logs); "text" (the default): plain lines, the ids on the record.
OWLAI_LOG_FORMAT = env.str("OWLAI_LOG_FORMAT", default="text")
if OWLAI_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured("OWLAI_LOG_FORMAT must be text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "owlai.logs.ContextFilter"}},
    "formatters": {"json": {"()": "owlai.logs.json_formatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            **({"formatter": "json"} if OWLAI_LOG_FORMAT == "json" else {}),
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # A line per model request at INFO (the URL, the status) is the client
    # library's, not ours: noise in a worker's log, and its CPU on every turn.
    "loggers": {name: {"level": "WARNING"} for name in ("httpx", "httpcore", "openai")},
}

# --- Model calls (chat.llm, chat.agent) ------------------------------------------
# Deadlines of one model call: connect, first byte (the first streamed data),
# idle (between data events; keep-alive comments are not progress) and total
# (the whole call, retries included).
OWLAI_MODEL_CONNECT_SECONDS = env.float("OWLAI_MODEL_CONNECT_SECONDS", default=5.0)
OWLAI_MODEL_FIRST_BYTE_SECONDS = env.float("OWLAI_MODEL_FIRST_BYTE_SECONDS", default=60.0)
OWLAI_MODEL_IDLE_SECONDS = env.float("OWLAI_MODEL_IDLE_SECONDS", default=30.0)
OWLAI_MODEL_TOTAL_SECONDS = env.float("OWLAI_MODEL_TOTAL_SECONDS", default=180.0)
# Retries only for HTTP 429 / 5xx and connection errors before any response,
# with exponential backoff and jitter, within the total deadline. A Retry-After
# longer than OWLAI_MODEL_RETRY_AFTER_MAX_SECONDS is not waited for.
OWLAI_MODEL_MAX_RETRIES = env.int("OWLAI_MODEL_MAX_RETRIES", default=2)
OWLAI_MODEL_RETRY_BASE_SECONDS = env.float("OWLAI_MODEL_RETRY_BASE_SECONDS", default=0.5)
OWLAI_MODEL_RETRY_AFTER_MAX_SECONDS = env.float("OWLAI_MODEL_RETRY_AFTER_MAX_SECONDS", default=10.0)
# A longer answer fails the turn (reading stops); a longer tool-call argument
# is refused by the executor (one audited `denied` row, never parsed).
OWLAI_MODEL_ANSWER_MAX_CHARS = env.int("OWLAI_MODEL_ANSWER_MAX_CHARS", default=200_000)
OWLAI_TOOL_ARGUMENT_MAX_CHARS = env.int("OWLAI_TOOL_ARGUMENT_MAX_CHARS", default=100_000)
# Characters of history re-sent to the model per call (a model's
# `history_chars` in the install config overrides it): oldest tool results are
# trimmed first, then the oldest turns dropped.
OWLAI_HISTORY_CHARS = env.int("OWLAI_HISTORY_CHARS", default=120_000)
if min(OWLAI_MODEL_CONNECT_SECONDS, OWLAI_MODEL_FIRST_BYTE_SECONDS, OWLAI_MODEL_IDLE_SECONDS) <= 0:
    raise ImproperlyConfigured("OWLAI_MODEL_*_SECONDS deadlines must be positive")
if OWLAI_MODEL_TOTAL_SECONDS <= 0 or OWLAI_MODEL_MAX_RETRIES < 0:
    raise ImproperlyConfigured("OWLAI_MODEL_TOTAL_SECONDS must be positive, OWLAI_MODEL_MAX_RETRIES not negative")

# --- Connectors (MCP servers; governance.connectors) -------------------------------
# Connecting (process start or HTTP connect, and the MCP handshake) must finish
# within this; each call is bounded by its connector's own timeout.
OWLAI_CONNECTOR_CONNECT_SECONDS = env.float("OWLAI_CONNECTOR_CONNECT_SECONDS", default=10.0)
# More visible connector tools than this: the turn gets a tool-search tool
# instead of every schema (the tools it loads pass the same visibility decision).
OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = env.int("OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD", default=20)
if OWLAI_CONNECTOR_CONNECT_SECONDS <= 0 or OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD < 0:
    raise ImproperlyConfigured("OWLAI_CONNECTOR_CONNECT_SECONDS must be positive, the search threshold not negative")
# A connector call's arguments (JSON) longer than this are refused before
# anything is sent (the model's general cap, OWLAI_TOOL_ARGUMENT_MAX_CHARS, is larger).
OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS = env.int("OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS", default=20_000)
# Approvals (chat.approvals): how long a request waits for the user before it
# expires (the call is then refused and the turn goes on), and how many denials
# of the same call (tool and arguments) in a conversation block it without asking.
OWLAI_APPROVAL_SECONDS = env.float("OWLAI_APPROVAL_SECONDS", default=300.0)
OWLAI_APPROVAL_AUTO_BLOCK_DENIALS = env.int("OWLAI_APPROVAL_AUTO_BLOCK_DENIALS", default=2)
if OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS <= 0 or OWLAI_APPROVAL_SECONDS <= 0 or OWLAI_APPROVAL_AUTO_BLOCK_DENIALS < 1:
    raise ImproperlyConfigured(
        "OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS and OWLAI_APPROVAL_SECONDS must be positive, "
        "OWLAI_APPROVAL_AUTO_BLOCK_DENIALS at least 1"
    )

# --- Audit write path ------------------------------------------------------------
# An audit write that cannot take its lock, or does not finish, within these
# fails closed (the turn fails with "could not be recorded") instead of
# stalling every turn behind a lock on the audit table. PostgreSQL only.
OWLAI_AUDIT_LOCK_TIMEOUT_MS = env.int("OWLAI_AUDIT_LOCK_TIMEOUT_MS", default=2000)
OWLAI_AUDIT_STATEMENT_TIMEOUT_MS = env.int("OWLAI_AUDIT_STATEMENT_TIMEOUT_MS", default=5000)
if OWLAI_AUDIT_LOCK_TIMEOUT_MS < 1 or OWLAI_AUDIT_STATEMENT_TIMEOUT_MS < 1:
    # 0 means "no timeout" to PostgreSQL: exactly the silent stall this prevents.
    raise ImproperlyConfigured("OWLAI_AUDIT_LOCK_TIMEOUT_MS and OWLAI_AUDIT_STATEMENT_TIMEOUT_MS must be at least 1")

# --- Websocket limits (chat.consumers) ---------------------------------------------
# Per socket: frames of any type pass a token bucket (rate per second, burst);
# `turn.start` frames also pass their own (rate per minute, burst). A frame over
# either gets an `error` event `rate_limited` and is dropped; the socket stays
# open. A client whose refused frames keep coming at more than
# OWLAI_WS_FLOOD_FACTOR x the frame rate for about OWLAI_WS_FLOOD_SECONDS is
# closed with 4429.
OWLAI_WS_FRAMES_PER_SECOND = env.float("OWLAI_WS_FRAMES_PER_SECOND", default=20.0)
OWLAI_WS_FRAME_BURST = env.int("OWLAI_WS_FRAME_BURST", default=60)
# Turn starts: a fast person sends ten in a row, then one every three seconds.
OWLAI_WS_TURN_STARTS_PER_MINUTE = env.float("OWLAI_WS_TURN_STARTS_PER_MINUTE", default=20.0)
OWLAI_WS_TURN_START_BURST = env.int("OWLAI_WS_TURN_START_BURST", default=10)
OWLAI_WS_FLOOD_FACTOR = env.float("OWLAI_WS_FLOOD_FACTOR", default=10.0)
OWLAI_WS_FLOOD_SECONDS = env.float("OWLAI_WS_FLOOD_SECONDS", default=3.0)
# Bytes daphne holds for one socket that the client has not read yet (its
# transport's write buffer). Over this, the socket gets no more events and is
# closed with 4408; the client reconnects and resyncs from the database.
OWLAI_WS_SEND_BUFFER_BYTES = env.int("OWLAI_WS_SEND_BUFFER_BYTES", default=1024 * 1024)
if min(OWLAI_WS_FRAMES_PER_SECOND, OWLAI_WS_TURN_STARTS_PER_MINUTE, OWLAI_WS_FLOOD_FACTOR) <= 0:
    raise ImproperlyConfigured("OWLAI_WS_FRAMES_PER_SECOND, _TURN_STARTS_PER_MINUTE and _FLOOD_FACTOR must be positive")
if min(OWLAI_WS_FRAME_BURST, OWLAI_WS_TURN_START_BURST, OWLAI_WS_SEND_BUFFER_BYTES) < 1 or OWLAI_WS_FLOOD_SECONDS <= 0:
    raise ImproperlyConfigured("OWLAI_WS_*_BURST and OWLAI_WS_SEND_BUFFER_BYTES must be at least 1")

# --- Agent API (agentapi) --------------------------------------------------------
# A follower of a turn's events reads the database at least this often (a
# published event wakes it at once), sends a keep-alive after this much quiet,
# and ends a stream after this long (the client goes on from its last seq).
OWLAI_AGENTAPI_POLL_SECONDS = env.float("OWLAI_AGENTAPI_POLL_SECONDS", default=1.0)
OWLAI_AGENTAPI_KEEPALIVE_SECONDS = env.float("OWLAI_AGENTAPI_KEEPALIVE_SECONDS", default=15.0)
OWLAI_AGENTAPI_STREAM_SECONDS = env.float("OWLAI_AGENTAPI_STREAM_SECONDS", default=900.0)

# --- Worker pool (turns) ---------------------------------------------------------
# Turns wait on the model most of their time, so workers run them in threads
# (`celery -A owlai worker -P threads -c 32`, see README "Production profile").
# A thread closes its database connection before each model call and after
# each task, so waiting turns hold no connection: connections in use follow
# the turns doing database work, not the thread count (bounded by it, plus one
# heartbeat connection per worker process).
OWLAI_MODEL_WAIT_RELEASES_DB = env.bool("OWLAI_MODEL_WAIT_RELEASES_DB", default=True)
# CONN_MAX_AGE inside workers (the web process keeps DB_CONN_MAX_AGE): 0 closes
# a thread's connection when its task ends, so idle pool threads hold none.
OWLAI_WORKER_DB_CONN_MAX_AGE = env.int("OWLAI_WORKER_DB_CONN_MAX_AGE", default=0)
if OWLAI_WORKER_DB_CONN_MAX_AGE and "pool" in DATABASES["default"].get("OPTIONS", {}):
    raise ImproperlyConfigured("OWLAI_WORKER_DB_CONN_MAX_AGE must be 0 with OWLAI_DB_POOL_SIZE (the pool keeps them)")
