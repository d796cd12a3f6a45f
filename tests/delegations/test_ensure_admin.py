"""`manage.py ensure_admin`, which `make run` calls before serving: a first admin with a
password printed once, and the address to log in at."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_the_first_admin_is_created_once_with_its_password_and_where_to_log_in() -> None:
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    text = out.getvalue()
    password = re.search(r"password: (\S+)", text)
    assert password is not None and "Log in at http://" in text   # it said "the address below"
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password.group(1))
    assert {group.name for group in admin.groups.all()} == {"composers", "approvers"}
    again = io.StringIO()
    call_command("ensure_admin", stdout=again)
    assert "no admin created" in again.getvalue() and get_user_model().objects.count() == 1
