import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.env import Env, EnvError

ROOT = Path(__file__).resolve().parent.parent


def test_it_reads_booleans_strictly():
    assert Env({"X": "yes"}).bool("X", False) is True
    assert Env({"X": "0"}).bool("X", True) is False
    assert Env({}).bool("X", True) is True
    with pytest.raises(EnvError, match="X='maybe' is not a boolean"):
        Env({"X": "maybe"}).bool("X", False)


def test_it_names_the_variable_of_a_bad_number_or_list():
    with pytest.raises(EnvError, match="PORT='eighty' is not a whole number"):
        Env({"PORT": "eighty"}).int("PORT", 8000)
    with pytest.raises(EnvError, match="PORT=70000 is above the maximum of 65535"):
        Env({"PORT": "70000"}).int("PORT", 8000, minimum=1, maximum=65535)
    with pytest.raises(EnvError, match="DJANGO_ALLOWED_HOSTS='a,,b' has an empty item"):
        Env({"DJANGO_ALLOWED_HOSTS": "a,,b"}).list("DJANGO_ALLOWED_HOSTS", [])


def test_it_reads_a_secret_from_a_file(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    assert Env({"DJANGO_SECRET_KEY_FILE": str(secret)}).str("DJANGO_SECRET_KEY") == "s3cret"
    with pytest.raises(EnvError, match="DJANGO_SECRET_KEY_FILE='/nonexistent' cannot be read"):
        Env({"DJANGO_SECRET_KEY_FILE": "/nonexistent"}).str("DJANGO_SECRET_KEY")


def test_it_hides_the_password_of_a_bad_database_url():
    with pytest.raises(EnvError) as info:
        Env({"DATABASE_URL": "mysql://u:hunter2@db/x"}).url("DATABASE_URL", None, schemes=("sqlite", "postgres"))
    assert "hunter2" not in str(info.value)
    assert "DATABASE_URL" in str(info.value)


def _start(tmp_path, **env):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}}
    environ.update(PORTAL_DATA_ROOT=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def test_it_refuses_to_start_with_a_malformed_setting(tmp_path):
    result = _start(tmp_path, DJANGO_DEBUG="maybe")
    assert result.returncode != 0
    assert "Invalid setting: DJANGO_DEBUG='maybe' is not a boolean" in result.stderr


def test_it_generates_the_local_secret_key_once(tmp_path):
    assert _start(tmp_path).returncode == 0
    key = (tmp_path / "secret_key").read_text()
    assert len(key) >= 50
    assert _start(tmp_path).returncode == 0
    assert (tmp_path / "secret_key").read_text() == key
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"
