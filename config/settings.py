"""Django settings, read from the environment only (see README "Configuration").

Embedded defaults run everything on one machine with no servers: SQLite under
PORTAL_DATA_ROOT, a filesystem Celery broker and a SQLite channel layer.
Setting REDIS_URL switches the broker, cache and channel layer to Redis.
"""

import ipaddress
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp import constants as _csp_constants
from django.core.exceptions import ImproperlyConfigured

from core.db_pool import PoolSizes as _PoolSizes
from core.env import Env, EnvError

BASE_DIR = Path(__file__).resolve().parent.parent
env = Env()


def _read_settings():
    try:
        return _settings_from_env()
    except (EnvError, ValueError) as exc:
        raise ImproperlyConfigured(f"Invalid setting: {exc}") from exc


def _settings_from_env():
    data_root = Path(env.str("PORTAL_DATA_ROOT", str(BASE_DIR / "var")))
    if not data_root.is_absolute():
        data_root = (BASE_DIR / data_root).resolve()
    data_root.mkdir(parents=True, exist_ok=True)
    return {
        "data_root": data_root,
        "secret_key": env.str("DJANGO_SECRET_KEY") or _local_secret_key(data_root),
        "debug": env.bool("DJANGO_DEBUG", False),
        "allowed_hosts": env.list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"]),
        "csrf_trusted_origins": env.list("DJANGO_CSRF_TRUSTED_ORIGINS", []),
        "database_url": env.url(
            "DATABASE_URL", f"sqlite:///{data_root / 'portal.sqlite3'}", schemes=("sqlite", "postgres", "postgresql")
        ),
        "redis_url": env.url("REDIS_URL", None, schemes=("redis", "rediss", "unix")),
        # PostgreSQL connection pool of each process (core/db_pool.py): the most connections; 0: no pool.
        "db_pool_max": env.int("PORTAL_DB_POOL_MAX", 8, minimum=0, maximum=1000),
        # Connections each process keeps open while idle.
        "db_pool_min": env.int("PORTAL_DB_POOL_MIN", 1, minimum=0, maximum=1000),
        # Seconds a request waits for a free connection before its 503 (a Celery task retries).
        "db_pool_timeout": env.int("PORTAL_DB_POOL_TIMEOUT", 30, minimum=1, maximum=600),
        # Processes holding a pool (make run: web, worker + its 2 children, beat, watcher), for the budget check.
        "db_processes": env.int("PORTAL_DB_PROCESSES", 6, minimum=1, maximum=100000),
        # Connections of max_connections left to all else (migrations, manage.py, psql, backups, monitoring).
        "db_headroom": env.int("PORTAL_DB_HEADROOM", 10, minimum=0, maximum=100000),
        "port": env.int("PORT", 8000, minimum=1, maximum=65535),
        "throttle_anon": env.rate("PORTAL_THROTTLE_ANON", "60/minute"),
        "throttle_user": env.rate("PORTAL_THROTTLE_USER", "3000/minute"),
        "log_level": env.str("PORTAL_LOG_LEVEL", "INFO").upper(),
        "reconcile_seconds": env.int("PORTAL_RECONCILE_SECONDS", 2, minimum=1, maximum=3600),
        "tensorboard_idle_seconds": env.int("PORTAL_TENSORBOARD_IDLE_SECONDS", 1800, minimum=60, maximum=7 * 86400),
        "artifact_root": _absolute(Path(env.str("PORTAL_ARTIFACT_ROOT", str(data_root / "artifacts")))),
        "artifact_import_dirs": [_absolute(Path(p)) for p in env.list("PORTAL_ARTIFACT_IMPORT_DIRS", [])],
        "artifact_max_bytes": env.int("PORTAL_ARTIFACT_MAX_BYTES", 20 * 1024**3, minimum=1),
        "webhook_allow_private": env.bool("PORTAL_WEBHOOK_ALLOW_PRIVATE", False),
        "metrics_token": env.str("PORTAL_METRICS_TOKEN"),
        "metrics_allow": _networks(
            "PORTAL_METRICS_ALLOW", env.list("PORTAL_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])
        ),
        "bench": env.bool("PORTAL_BENCH", False),
        # Logs and disk (jobs/executors/log_reader.py): a log line longer than this is shown cut, with a mark.
        "log_line_max_bytes": env.int("PORTAL_LOG_LINE_MAX_BYTES", 16 * 1024, minimum=256, maximum=16 * 1024**2),
        # A local job's log (per worker) stops growing at this size, with a line saying so; the job goes on.
        "job_log_max_bytes": env.int("PORTAL_JOB_LOG_MAX_BYTES", 100 * 1024**2, minimum=4096),
        # A local job whose folders (code, output, tmp, checkpoints, TensorBoard) hold more than this fails.
        "job_disk_max_bytes": env.int("PORTAL_JOB_DISK_MAX_BYTES", 20 * 1024**3, minimum=1024**2),
        # Finished jobs' folders, outputs and logs are deleted this many days after they ended; 0 keeps them.
        "job_retention_days": env.int("PORTAL_JOB_RETENTION_DAYS", 30, minimum=0, maximum=36500),
        # A cached job environment no job used for this many days is deleted; 0 keeps them.
        "job_env_unused_days": env.int("PORTAL_JOB_ENV_UNUSED_DAYS", 14, minimum=0, maximum=36500),
        # Supervision (core/heartbeats.py): how often worker, beat and watcher refresh their heartbeat, seconds.
        "heartbeat_seconds": env.int("PORTAL_HEARTBEAT_SECONDS", 5, minimum=1, maximum=300),
        # A worker, beat or watcher heartbeat older than this (seconds) makes /healthz answer 503.
        "health_max_age": env.int("PORTAL_HEALTH_MAX_AGE_SECONDS", 30, minimum=2, maximum=3600),
        # The same for the last scheduling cycle; 0: twice PORTAL_RECONCILE_SECONDS plus 30 s.
        "health_cycle_max_age": env.int("PORTAL_HEALTH_CYCLE_MAX_AGE_SECONDS", 0, minimum=0, maximum=86400),
        # The edge (config/edge.py): the largest request body, in bytes, refused with 413 before it is read.
        "max_request_bytes": env.int("PORTAL_MAX_REQUEST_BYTES", 4 * 1024**2, minimum=1024, maximum=1024**3),
        # The same for predictions and feedback (POST /serve/...), which carry the model's inputs.
        "serve_max_request_bytes": env.int(
            "PORTAL_SERVE_MAX_REQUEST_BYTES", 16 * 1024**2, minimum=1024, maximum=1024**3
        ),
        # The deepest nesting of arrays and objects a JSON body may have (core/parsers.py).
        "json_max_depth": env.int("PORTAL_JSON_MAX_DEPTH", 32, minimum=2, maximum=1000),
        # Networks of the reverse proxies whose X-Forwarded-For / -Proto are believed (config/asgi.py); none by default.
        "trusted_proxies": _networks("PORTAL_TRUSTED_PROXIES", env.list("PORTAL_TRUSTED_PROXIES", [])),
        # Webhook outbox (webhooks/outbox.py): attempts at one delivery before it is marked failed.
        "webhook_max_attempts": env.int("PORTAL_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1, maximum=30),
        # The wait after a delivery's first failed attempt, in seconds; x4 after each further one (+-20 % jitter).
        "webhook_retry_seconds": env.int("PORTAL_WEBHOOK_RETRY_SECONDS", 10, minimum=1, maximum=86400),
        # The longest wait between two attempts, in seconds (default 6 h).
        "webhook_retry_max_seconds": env.int(
            "PORTAL_WEBHOOK_RETRY_MAX_SECONDS", 6 * 3600, minimum=1, maximum=7 * 86400
        ),
        # How often beat sends the deliveries that are due, in seconds.
        "webhook_poll_seconds": env.int("PORTAL_WEBHOOK_POLL_SECONDS", 5, minimum=1, maximum=300),
        # Login protection (accounts/login.py, django-axes): wrong passwords before a lock-out, per account/address.
        "login_failure_limit": env.int("PORTAL_LOGIN_FAILURE_LIMIT", 10, minimum=1, maximum=1000),
        # How long a lock-out lasts, in minutes; 0 keeps it until an admin lifts it.
        "login_lockout_minutes": env.int("PORTAL_LOGIN_LOCKOUT_MINUTES", 15, minimum=0, maximum=7 * 24 * 60),
        # What failures are counted by: username, ip_address, or username+ip_address (the pair); comma-separated.
        "login_lockout_parameters": _lockout_parameters(
            env.list("PORTAL_LOGIN_LOCKOUT_BY", ["username", "ip_address"])
        ),
        # The longest lifetime a new API token may be given, in days; 0: no bound, and tokens may never expire.
        "token_max_days": env.int("PORTAL_TOKEN_MAX_DAYS", 0, minimum=0, maximum=3650),
        # Sessions, sockets and headers: the portal is served over HTTPS (Secure cookies, HSTS; platform/README.md).
        "https": env.bool("PORTAL_HTTPS", False),
        # With PORTAL_HTTPS: how long browsers keep to HTTPS (Strict-Transport-Security max-age), seconds; 0: no HSTS.
        "hsts_seconds": env.int("PORTAL_HSTS_SECONDS", 3600, minimum=0, maximum=2 * 365 * 86400),
        # With PORTAL_HTTPS: HSTS covers every subdomain of the portal's host too.
        "hsts_subdomains": env.bool("PORTAL_HSTS_INCLUDE_SUBDOMAINS", False),
        # With PORTAL_HTTPS: HSTS asks to be preloaded into browsers (needs subdomains and a year or more).
        "hsts_preload": env.bool("PORTAL_HSTS_PRELOAD", False),
        # With PORTAL_HTTPS: plain-HTTP requests are redirected to HTTPS (not /healthz and /metrics).
        "ssl_redirect": env.bool("PORTAL_SSL_REDIRECT", False),
        # Open websockets check again this often (seconds) that their session or API token still holds.
        "ws_recheck_seconds": env.int("PORTAL_WS_RECHECK_SECONDS", 60, minimum=1, maximum=3600),
    }


def _lockout_parameters(values: list[str]) -> list:
    """PORTAL_LOGIN_LOCKOUT_BY as django-axes' AXES_LOCKOUT_PARAMETERS: ``a+b`` counts the pair together."""
    known = {"username", "ip_address"}
    parameters: list = []
    for value in values:
        parts = value.split("+")
        if not set(parts) <= known:
            raise EnvError(
                f"PORTAL_LOGIN_LOCKOUT_BY: {value!r} is not one of username, ip_address, username+ip_address"
            )
        parameters.append(parts[0] if len(parts) == 1 else parts)
    return parameters


def _networks(name: str, values: list[str]) -> list:
    """CIDRs such as ``10.0.0.0/8``; ``none`` alone allows no network (the metrics token only)."""
    if values == ["none"]:
        return []
    try:
        return [ipaddress.ip_network(value) for value in values]
    except ValueError as exc:
        raise EnvError(f"{name}: {exc} (give comma-separated networks such as 10.0.0.0/8,::1/128, or none)") from None


def _absolute(path: Path) -> Path:
    return path if path.is_absolute() else (BASE_DIR / path).resolve()


def _local_secret_key(data_root: Path) -> str:
    """Generate the key once into the data root, so sessions survive restarts of a local install."""
    path = data_root / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


_s = _read_settings()
if _s["log_level"] not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        f"Invalid setting: PORTAL_LOG_LEVEL={_s['log_level']!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )

PORTAL_DATA_ROOT = _s["data_root"]
PORTAL_PORT = _s["port"]
# A TensorBoard nobody has opened for this long is stopped (tensorboards.tasks.reconcile_tensorboards).
PORTAL_TENSORBOARD_IDLE_SECONDS = _s["tensorboard_idle_seconds"]
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
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
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
}

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

# --- Login protection and API tokens (accounts/login.py, accounts/tokens.py) ---
# axes first: it refuses a locked-out account or address before any password is checked, on every path that
# calls authenticate() (the login page, the Django admin, POST /api/v1/auth/token/). The second backend is
# Django's ModelBackend that also writes the "login" audit entry.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "accounts.login.PasswordBackend"]
AXES_FAILURE_LIMIT = _s["login_failure_limit"]
AXES_COOLOFF_TIME = timedelta(minutes=_s["login_lockout_minutes"]) if _s["login_lockout_minutes"] else None
AXES_LOCKOUT_PARAMETERS = _s["login_lockout_parameters"]
# The address is REMOTE_ADDR, which the ASGI layer sets to the real client behind trusted proxies: never a header.
AXES_CLIENT_IP_CALLABLE = "accounts.login.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.login.lockout_response"
# Tries while locked out do not push the end of the lock-out back: the time the page gives holds.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A right password does not forget earlier failures: that would also forget the address's, and one valid
# account would then let an address guess others' passwords without end.
AXES_RESET_ON_SUCCESS = False
AXES_DISABLE_ACCESS_LOG = True  # sign-ins, sign-outs and lock-outs are in the portal's audit log instead
AXES_SENSITIVE_PARAMETERS = ["password"]
AXES_VERBOSE = False
PORTAL_TOKEN_MAX_DAYS = _s["token_max_days"]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# The portal's own catalogues (templates, views, portal.js); compiled .mo files are committed so that
# a machine without gettext serves Chinese too.
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
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

# --- Sessions, sockets and headers (frontend/csp.py, frontend/ws_*.py; platform/README.md "Serving over HTTPS") ---
# Open websockets look again this often whether their session or API token still holds (they also close at once
# on logout and revocation: frontend/ws_sessions.py).
PORTAL_WS_RECHECK_SECONDS = _s["ws_recheck_seconds"]
# Off by default: `make run` serves http://127.0.0.1, where Secure cookies would never be sent back.
PORTAL_HTTPS = _s["https"]
SESSION_COOKIE_SECURE = PORTAL_HTTPS
CSRF_COOKIE_SECURE = PORTAL_HTTPS
# Django sends HSTS only on HTTPS answers (request.is_secure(): behind a proxy, PORTAL_TRUSTED_PROXIES).
SECURE_HSTS_SECONDS = _s["hsts_seconds"] if PORTAL_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = PORTAL_HTTPS and _s["hsts_subdomains"]
SECURE_HSTS_PRELOAD = PORTAL_HTTPS and _s["hsts_preload"]
SECURE_SSL_REDIRECT = PORTAL_HTTPS and _s["ssl_redirect"]
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]  # probes and scrapers inside the cluster speak plain HTTP
for _name, _needs in (("PORTAL_SSL_REDIRECT", "ssl_redirect"), ("PORTAL_HSTS_PRELOAD", "hsts_preload")):
    if _s[_needs] and not PORTAL_HTTPS:
        raise ImproperlyConfigured(
            f"Invalid setting: {_name}=true needs PORTAL_HTTPS=true (the portal is served over HTTPS)"
        )
if SECURE_HSTS_PRELOAD and not (SECURE_HSTS_INCLUDE_SUBDOMAINS and SECURE_HSTS_SECONDS >= 365 * 86400):
    raise ImproperlyConfigured(
        "Invalid setting: PORTAL_HSTS_PRELOAD=true needs PORTAL_HSTS_INCLUDE_SUBDOMAINS=true and "
        "PORTAL_HSTS_SECONDS of at least 31536000 (one year): browsers' preload lists accept nothing less"
    )
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# No script reads the CSRF cookie: portal.js sends the token of the page's own forms, Swagger UI and the
# browsable API the one rendered into them.
CSRF_COOKIE_HTTPONLY = True
# Content-Security-Policy (django-csp 4): no inline script or style without the request's nonce, nothing from
# other sites, no framing by others. frontend.csp adds the websocket origins of the host a page was served from.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1, "frontend.csp.PortalCSPMiddleware"
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'", _csp_constants.NONCE],
        "style-src": ["'self'", _csp_constants.NONCE],
        "img-src": ["'self'", "data:"],  # Swagger UI's and uPlot's icons are data: URLs
        "connect-src": ["'self'"],
        "frame-src": ["'self'"],  # the job page's TensorBoard
        "frame-ancestors": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
    },
}

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
}

# --- The edge: request limits, JSON errors, trusted proxies (config/edge.py, config/asgi.py) ---
# Bodies over these are answered 413 at the ASGI layer, before Django reads them or anyone is authenticated.
PORTAL_MAX_REQUEST_BYTES = _s["max_request_bytes"]
PORTAL_SERVE_MAX_REQUEST_BYTES = _s["serve_max_request_bytes"]
# Django's own check (on request.body / request.POST) stays behind the edge's: it never refuses what the edge let in.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(PORTAL_MAX_REQUEST_BYTES, PORTAL_SERVE_MAX_REQUEST_BYTES)
PORTAL_JSON_MAX_DEPTH = _s["json_max_depth"]
# X-Forwarded-For / X-Forwarded-Proto are applied to the ASGI scope (client address, scheme) by uvicorn's
# ProxyHeadersMiddleware for peers in these networks only; REMOTE_ADDR and request.is_secure() are then right
# everywhere, so Django needs no SECURE_PROXY_SSL_HEADER (which would believe the header from anyone).
PORTAL_TRUSTED_PROXIES = _s["trusted_proxies"]
# DRF's throttles identify anonymous callers by REMOTE_ADDR, never by X-Forwarded-For (rest_framework.throttling).
REST_FRAMEWORK["NUM_PROXIES"] = 0
# JSON bodies: nesting capped at PORTAL_JSON_MAX_DEPTH, NUL refused (core/parsers.py); forms as before.
REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] = [
    "core.parsers.JSONParser",
    "rest_framework.parsers.FormParser",
    "rest_framework.parsers.MultiPartParser",
]

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
