from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from delegations.accounts.roles import APPROVERS, COMPOSERS


class Command(BaseCommand):
    help = "Create a local admin (with a random password, printed once) when no user exists yet."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        users = get_user_model()
        if users.objects.exists():
            self.stdout.write("Users exist already; no admin created. "
                              "(`manage.py changepassword NAME` resets a password.)")
            return
        password = secrets.token_urlsafe(12)
        admin = users.objects.create_superuser(username=username, email="", password=password)
        for name in (COMPOSERS, APPROVERS):
            admin.groups.add(Group.objects.get_or_create(name=name)[0])
        bar = "=" * 64
        self.stdout.write(f"\n{bar}\n  Created the local admin. Log in at {settings.HANDOFF_BASE_URL}/ (or the\n"
                          f"  address the server says it is serving on) with\n"
                          f"    username: {username}\n    password: {password}\n"
                          f"  This password is shown only now; change it under Account.\n{bar}\n")
