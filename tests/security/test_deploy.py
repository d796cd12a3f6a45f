"""`manage.py check --deploy` is clean with the production settings (HANDOFF_SECURE=1)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check_deploy(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("HANDOFF_", "DJANGO_")) and key not in ("DEBUG", "SECRET_KEY")}
    environment.update({"DJANGO_SETTINGS_MODULE": "handoff_site.settings",
                        "HANDOFF_DATA_DIR": str(tmp_path), "SECRET_KEY": secrets.token_urlsafe(50),
                        "ALLOWED_HOSTS": "handoff.example.com",
                        "CSRF_TRUSTED_ORIGINS": "https://handoff.example.com", **env})
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_with_handoff_secure(tmp_path: Path) -> None:
    result = check_deploy(tmp_path, HANDOFF_SECURE="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.slow
def test_without_handoff_secure_check_deploy_names_what_is_missing(tmp_path: Path) -> None:
    result = check_deploy(tmp_path)
    assert result.returncode != 0
    # W010: the session cookie (Django names it W012 only when it also finds its own
    # SessionMiddleware by path; ours is a subclass, handoff_site/loop_middleware.py)
    for check in ("security.W004", "security.W008", "security.W010", "security.W016"):
        assert check in result.stdout + result.stderr


def test_handoff_secure_refuses_debug(tmp_path: Path) -> None:
    result = check_deploy(tmp_path, HANDOFF_SECURE="1", DEBUG="1")
    assert result.returncode != 0
    assert "turn DEBUG off" in result.stderr


def test_the_production_settings_trust_the_proxy_and_secure_the_cookies() -> None:
    script = ("from django.conf import settings as s; print(s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, "
              "s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.CSRF_TRUSTED_ORIGINS)")
    environment = {**os.environ, "HANDOFF_SECURE": "1", "CSRF_TRUSTED_ORIGINS": "https://handoff.example.com",
                   "DJANGO_SETTINGS_MODULE": "handoff_site.settings", "DEBUG": "0"}
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {script}"],
                            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["('HTTP_X_FORWARDED_PROTO',", "'https')", "True", "31536000", "True",
                                     "True", "['https://handoff.example.com']"], result.stderr


def test_a_shared_cache_url_makes_the_rate_limits_count_across_processes() -> None:
    script = "from django.conf import settings as s; c = s.CACHES['default']; print(c['BACKEND'], c['LOCATION'])"
    environment = {**os.environ, "HANDOFF_CACHE_URL": "redis://127.0.0.1:6399/2",
                   "DJANGO_SETTINGS_MODULE": "handoff_site.settings"}
    result = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {script}"],
                            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["django.core.cache.backends.redis.RedisCache", "redis://127.0.0.1:6399/2"], \
        result.stderr
