"""Django settings, read from the environment only (see README "Configuration").

Embedded defaults run everything on one machine with no servers: SQLite under
PORTAL_DATA_ROOT, a filesystem Celery broker and a SQLite channel layer.
Setting REDIS_URL switches the broker, cache and channel layer to Redis.
"""

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.environment import BASE_DIR
from config.environment import SETTINGS as _s
from core.db_pool import PoolSizes as _PoolSizes

PORTAL_DATA_ROOT = _s["data_root"]
PORTAL_PORT = _s["port"]
# A TensorBoard nobody has opened for this long is stopped (tensorboards.tasks.reconcile_tensorboards).
PORTAL_TENSORBOARD_IDLE_SECONDS = _s["tensorboard_idle_seconds"]
# Jobs holding GPUs on a cluster that became unreachable are requeued after this (jobs/running.py).
PORTAL_CLUSTER_GRACE_SECONDS = _s["cluster_grace_seconds"]
# Registered model versions keep a copy of their artifact here (models_registry/artifacts.py).
PORTAL_ARTIFACT_ROOT = _s["artifact_root"]
# Folders from which a version may be registered by a file:// URI (copied into the store); none by default.
PORTAL_ARTIFACT_IMPORT_DIRS = _s["artifact_import_dirs"]
# The most bytes one registered artifact may hold (counted while copying); default 20 GiB.
PORTAL_ARTIFACT_MAX_BYTES = _s["artifact_max_bytes"]
# Webhooks may call loopback, private and link-local addresses (SSRF guard off): for receivers inside the network.
PORTAL_WEBHOOK_ALLOW_PRIVATE = _s["webhook_allow_private"]

# --- Webhook outbox (webhooks/outbox.py) ---
# A failed attempt is retried after PORTAL_WEBHOOK_RETRY_SECONDS x 4^(n-1), at most ..._MAX_SECONDS, +-20 %;
# after PORTAL_WEBHOOK_MAX_ATTEMPTS attempts the delivery is marked failed.
PORTAL_WEBHOOK_MAX_ATTEMPTS = _s["webhook_max_attempts"]
PORTAL_WEBHOOK_RETRY_SECONDS = _s["webhook_retry_seconds"]
PORTAL_WEBHOOK_RETRY_MAX_SECONDS = _s["webhook_retry_max_seconds"]
# /metrics (config/metrics/): a Bearer token, and networks that may scrape without one.
PORTAL_METRICS_TOKEN = _s["metrics_token"]
PORTAL_METRICS_ALLOW = _s["metrics_allow"]
# Mounts /bench/bare, bench/api.py's ceiling: never set in production.
PORTAL_BENCH = _s["bench"]
REDIS_URL = _s["redis_url"]
SECRET_KEY = _s["secret_key"]
DEBUG = _s["debug"]
ALLOWED_HOSTS = _s["allowed_hosts"]
CSRF_TRUSTED_ORIGINS = _s["csrf_trusted_origins"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",  # failed-login lock-outs (see "Login protection" below)
    # The portal's apps, bottom floor first (docs/architecture.md "The stack").
    "core",  # heartbeats of worker, beat, watcher and the scheduling cycle (core/heartbeats.py)
    "accounts",
    "clusters",
    "quotas",
    "images",
    "webhooks",
    "jobs",
    "tensorboards",
    "models_registry",
    "serving",
    "demo",
    "frontend",
]

MIDDLEWARE = [
    # django-prometheus (/metrics): first and last, so that the pair times and counts every request and response.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    # NUL and other control characters in the address, query parameters and form fields: a 400 naming them.
    "config.parameters.ControlCharactersMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy (django-csp; CONTENT_SECURITY_POLICY in config/settings_security.py).
    "frontend.csp.PortalCSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    # Times in the reader's time zone (the portal_tz cookie portal.js sets from the browser).
    "frontend.timezones.ReaderTimeZoneMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A sign-in refused by a lock-out becomes its page / JSON 429 (accounts.login.lockout_response).
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Databases ---------------------------------------------------------------
_default_db = dj_database_url.parse(_s["database_url"], conn_max_age=0)
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat write to the same file: WAL lets readers run beside a
    # writer, and IMMEDIATE transactions take the write lock up front instead of
    # failing half-way with "database is locked".
    _default_db["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so that the worker and server processes started by the
    # end-to-end tests see the test database.
    _default_db["TEST"] = {"NAME": str(PORTAL_DATA_ROOT / "test-portal.sqlite3")}
# django-prometheus's wrappers of the same backends count connections, queries, their errors and durations
# (django_db_*, /metrics); connection.vendor stays "sqlite" / "postgresql". Not the channels-lite file below:
# its ORM polls every 50 ms while a websocket listens, which would drown the portal's own queries.
_default_db["ENGINE"] = {
    "django.db.backends.sqlite3": "django_prometheus.db.backends.sqlite3",
    "django.db.backends.postgresql": "django_prometheus.db.backends.postgresql",
}.get(_default_db["ENGINE"], _default_db["ENGINE"])
DATABASES = {"default": _default_db}

# --- Database connection pool (core/db_pool.py, core/db_busy.py, core/db_checks.py) ---
# On PostgreSQL each process keeps a pool of at most PORTAL_DB_POOL_MAX connections (psycopg_pool through
# Django's OPTIONS["pool"]; CONN_MAX_AGE stays 0, as pooling requires): a request waits up to
# PORTAL_DB_POOL_TIMEOUT s for one, then gets 503 + Retry-After (core.db_busy.PoolBusyMiddleware). Budget:
# PORTAL_DB_PROCESSES x PORTAL_DB_POOL_MAX + PORTAL_DB_HEADROOM <= max_connections - reserved, checked by
# `manage.py migrate` / `manage.py check --database default` (core.db_checks). Nothing changes on SQLite.
try:
    _db_pool = _PoolSizes(
        min_size=_s["db_pool_min"],
        max_size=_s["db_pool_max"],
        timeout=_s["db_pool_timeout"],
        processes=_s["db_processes"],
        headroom=_s["db_headroom"],
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"Invalid setting: {exc}") from exc
PORTAL_DB_POOL = None  # the pool's arguments where there is one
PORTAL_DB_PROCESSES = _db_pool.processes
PORTAL_DB_HEADROOM = _db_pool.headroom
if _default_db["ENGINE"].endswith("postgresql") and _db_pool.pooled:
    PORTAL_DB_POOL = _db_pool.django_options()
    _default_db.setdefault("OPTIONS", {})["pool"] = PORTAL_DB_POOL
    # A pooled connection is checked before it is handed out: one PostgreSQL restart costs no request an error.
    _default_db["CONN_HEALTH_CHECKS"] = True
# Last, so that its process_exception is asked first and the 503 passes every process_response (metrics).
MIDDLEWARE.append("core.db_busy.PoolBusyMiddleware")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache, Celery, Channels -------------------------------------------------
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CELERY_BROKER_URL = REDIS_URL
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    # kombu's filesystem transport: a real broker between processes of one
    # machine, with nothing to install or start.
    _broker_dir = PORTAL_DATA_ROOT / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://localhost/"
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"  # writes and claims messages atomically
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # broadcast (pidbox) exchanges; kombu's default is a folder "control" in the working directory
        "control_folder": str(_broker_dir / "control"),
        # The transport polls its folder; a short interval keeps job starts quick.
        "polling_interval": 0.1,
    }
    # channels-lite: a channel layer in its own SQLite file, so that the worker
    # process can push to websocket clients of the web process without Redis.
    DATABASES["channels"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(PORTAL_DATA_ROOT / "channels.sqlite3"),
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        "TEST": {"NAME": str(PORTAL_DATA_ROOT / "test-channels.sqlite3")},
    }
    DATABASE_ROUTERS = ["channels_lite.router.ChannelsRouter"]
    INSTALLED_APPS.append("channels_lite")
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_lite.layers.core.SQLiteChannelLayer",
            "CONFIG": {"database": "channels", "polling_interval": 0.05},
        }
    }

CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(PORTAL_DATA_ROOT / "celerybeat-schedule")
CELERY_TIMEZONE = "UTC"
# Compare running jobs with their executor, release GPUs of ended ones and admit
# what now fits. Submits, endings and cancels also trigger a cycle at once.
CELERY_BEAT_SCHEDULE = {
    "reconcile-jobs": {"task": "jobs.tasks.reconcile_jobs", "schedule": float(_s["reconcile_seconds"])},
    # Stop TensorBoards nobody visited for PORTAL_TENSORBOARD_IDLE_SECONDS; show jobs' new runs on the others.
    "reconcile-tensorboards": {"task": "tensorboards.tasks.reconcile_tensorboards", "schedule": 60.0},
    # Model servers of deployment variants (start, restart crashed ones, stop removed ones) and rollout steps.
    "reconcile-model-servers": {"task": "serving.tasks.reconcile_servers", "schedule": 3.0},
    # Image builds: launch queued Kaniko Jobs, follow running ones, add finished images to the catalogue.
    "reconcile-image-builds": {"task": "images.tasks.reconcile_builds", "schedule": 10.0},
    # Webhook deliveries that are due (retries, first attempts whose task was lost) are claimed and sent; a run
    # a busy worker has not started by the next one is dropped (expires).
    "send-webhook-deliveries": {
        "task": "webhooks.tasks.send_due_deliveries",
        "schedule": float(_s["webhook_poll_seconds"]),
        "options": {"expires": float(_s["webhook_poll_seconds"])},
    },
    # Delivery log entries older than 30 days that are over are dropped.
    "prune-webhook-deliveries": {"task": "webhooks.tasks.prune_deliveries", "schedule": 3600.0},
    # Kubernetes objects of jobs the portal no longer knows (a deleted job, a replaced run) are deleted.
    "collect-job-garbage": {"task": "jobs.tasks.collect_garbage", "schedule": 600.0},
    # Finished jobs' files past PORTAL_JOB_RETENTION_DAYS, and job environments unused for PORTAL_JOB_ENV_UNUSED_DAYS.
    "clean-up-job-files": {"task": "jobs.tasks.clean_up_job_files", "schedule": 3600.0},
    # Quota loans that are due end (loan.expire) and a scheduling cycle takes their GPUs back (quotas.services).
    "expire-quota-loans": {"task": "quotas.tasks.expire_quota_loans", "schedule": 5.0, "options": {"expires": 5.0}},
}
# The longest a quota loan may last (quotas.services.loan_create).
PORTAL_QUOTA_LOAN_MAX_DAYS = 90

# --- Logs and disk (jobs/executors/log_reader.py, jobs/retention.py, jobs/executors/local_disk.py) ---
# A log line longer than this many bytes is shown as its first bytes and "… [line cut: N bytes]".
PORTAL_LOG_LINE_MAX_BYTES = _s["log_line_max_bytes"]
# A local job's log (per worker) stops growing here; the job goes on, its log says it was cut.
PORTAL_JOB_LOG_MAX_BYTES = _s["job_log_max_bytes"]
# A local job whose writable folders hold more than this fails (reason disk_limit_exceeded).
PORTAL_JOB_DISK_MAX_BYTES = _s["job_disk_max_bytes"]
# Days after which a finished job's files are deleted (0: kept forever), and unused job environments.
PORTAL_JOB_RETENTION_DAYS = _s["job_retention_days"]
PORTAL_JOB_ENV_UNUSED_DAYS = _s["job_env_unused_days"]

# --- The scheduler service (jobs/scheduler_service.py, manage.py run_scheduler) ---
PORTAL_SCHEDULER = _s["scheduler"]
PORTAL_SCHEDULER_DELAY_SECONDS = _s["scheduler_delay_ms"] / 1000
PORTAL_SCHEDULER_PERIOD_SECONDS = _s["scheduler_period_seconds"]
PORTAL_SCHEDULER_LEASE_SECONDS = _s["scheduler_lease_seconds"]

# --- Supervision and health (core/heartbeats.py, config/health.py, platform/supervisord.conf) ---
# Beat's default scheduler, refreshing beat's heartbeat from its own tick.
CELERY_BEAT_SCHEDULER = "core.heartbeats:BeatScheduler"
PORTAL_HEARTBEAT_SECONDS = _s["heartbeat_seconds"]
PORTAL_HEALTH_MAX_AGE = _s["health_max_age"]
PORTAL_HEALTH_CYCLE_MAX_AGE = _s["health_cycle_max_age"] or 2 * _s["reconcile_seconds"] + 30
if PORTAL_HEALTH_MAX_AGE < 2 * PORTAL_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        f"Invalid setting: PORTAL_HEALTH_MAX_AGE_SECONDS={PORTAL_HEALTH_MAX_AGE} must be at least twice "
        f"PORTAL_HEARTBEAT_SECONDS={PORTAL_HEARTBEAT_SECONDS}, or a healthy process would look stale between beats"
    )

# --- Auth, i18n, static ------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# The portal's own catalogues (templates, views, portal.js); compiled .mo files are committed so that
# a machine without gettext serves Chinese too.
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
# The portal's English date formats (config/formats/en): "3 Dec 2026, 22:15", not "Dec. 3, 2026, 10:15 p.m.".
FORMAT_MODULE_PATH = ["config.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = PORTAL_DATA_ROOT / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the apps' static folders when collectstatic has not run
# (tests, a first `make run` that was interrupted).
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "SAMEORIGIN"

# --- REST framework ----------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes anonymous calls 401, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.api.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_CLASSES": ["core.api.AnonThrottle", "core.api.UserThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": _s["throttle_anon"], "user": _s["throttle_user"]},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    # Throttles identify anonymous callers by REMOTE_ADDR, never by X-Forwarded-For (rest_framework.throttling);
    # the ASGI layer sets REMOTE_ADDR from trusted proxies only (PORTAL_TRUSTED_PROXIES).
    "NUM_PROXIES": 0,
    # JSON bodies: nesting capped at PORTAL_JSON_MAX_DEPTH, NUL refused (core/parsers.py); forms as before.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}

# Login protection, sessions, sockets, headers and the edge's limits.
from config.settings_security import *  # noqa: E402, F403

SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Training jobs, department quotas, models and serving. See API.md for the contract.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": _s["log_level"]},
    # httpx logs every request at INFO: the TensorBoard proxy makes many.
    "loggers": {"httpx": {"level": "WARNING"}},
}
