"""The portal's settings as read from the environment (core/env.py), validated, in one dict: ``SETTINGS``.

config/settings.py and config/settings_security.py turn it into Django's settings; every variable is listed in
README "Configuration" and platform/env.example. A bad value stops start-up with ImproperlyConfigured naming it.
"""

import ipaddress
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

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
        # Jobs holding GPUs on a cluster that became unreachable go back to the queue after this many seconds.
        "cluster_grace_seconds": env.int("PORTAL_CLUSTER_GRACE_SECONDS", 300, minimum=0, maximum=7 * 86400),
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
        # Who runs scheduling cycles (jobs/scheduler_service.py): `service`, the standing scheduler
        # (`manage.py run_scheduler`, one leader) that requests only notify; `inline`, each request runs its own.
        "scheduler": _choice("PORTAL_SCHEDULER", env.str("PORTAL_SCHEDULER", "inline"), ("inline", "service")),
        # The service gathers the requests of a burst into one cycle: it waits this long after the first (ms).
        "scheduler_delay_ms": env.int("PORTAL_SCHEDULER_DELAY_MS", 20, minimum=0, maximum=10000),
        # The service runs a full cycle at least this often (seconds), for what time alone changes.
        "scheduler_period_seconds": env.int("PORTAL_SCHEDULER_PERIOD_SECONDS", 5, minimum=1, maximum=3600),
        # A leader that stops renewing its lease (SQLite) is replaced after this long; seconds.
        "scheduler_lease_seconds": env.int("PORTAL_SCHEDULER_LEASE_SECONDS", 5, minimum=2, maximum=600),
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


def _choice(name: str, value: str | None, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise EnvError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value


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


SETTINGS = _read_settings()
if SETTINGS["log_level"] not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        f"Invalid setting: PORTAL_LOG_LEVEL={SETTINGS['log_level']!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )
