"""A2A push notification configs over Handoff's tasks: the SDK's ``PushNotificationConfigStore``
kept in ``TaskPushConfig`` rows.

A caller sets configs on their own tasks only (any other task id is TaskNotFound, as a task
they cannot see is elsewhere), and reads only their own. A config is checked before it is
stored: an http(s) URL with no credentials in it, whose host is a public address (the SDK's
own check) unless the operator allows private ones (``HANDOFF_A2A_PUSH_ALLOW_PRIVATE``), so
no caller points Handoff's requests at the site's own network. Dispatch reads every config
of a task, whoever set it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from a2a.server.context import ServerCallContext
from a2a.server.tasks.push_notification_config_store import (
    PushNotificationConfigStore,
    normalize_push_notification_config,
)
from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from a2a.utils.push_url_validator import validate_push_notification_url
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from delegations.models import Run, TaskPushConfig
from delegations.models.peer_urls import carries_credentials

MAX_CONFIGS_PER_TASK = 10
EXAMPLE_URL = "https://example.com/a2a-notifications"
# the longest each part may be (the columns' sizes), and how a refusal names it
LIMITS = {"id": 200, "url": 2000, "token": 500, "authentication.scheme": 50,
          "authentication.credentials": 4000}


def config_problem(config: TaskPushNotificationConfig) -> str | None:
    """What is wrong with ``config`` as written (its URL's address aside), else None."""
    if not config.url.strip():
        return (f"The push notification config needs a url: where to POST the task when its "
                f"state changes, e.g. {EXAMPLE_URL}.")
    values = {"id": config.id, "url": config.url, "token": config.token,
              "authentication.scheme": config.authentication.scheme,
              "authentication.credentials": config.authentication.credentials}
    for name, limit in LIMITS.items():
        if len(values[name]) > limit:
            return f"The config's {name} is {len(values[name])} characters long; keep it to {limit}."
    try:
        parts = urlsplit(config.url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"The push URL {config.url!r} is not an http:// or https:// URL with a host, e.g. {EXAMPLE_URL}."
    if carries_credentials(config.url):
        return ("Leave credentials out of the push URL: send them as the config's authentication "
                "(scheme and credentials, sent as the Authorization header), or a shared secret "
                "as its token (sent as X-A2A-Notification-Token).")
    if config.authentication.scheme and not config.authentication.credentials:
        return (f"The config's authentication names the scheme {config.authentication.scheme!r} "
                f"but no credentials; add them, or leave authentication out.")
    return None


async def address_problem(url: str) -> str | None:
    """Why Handoff will not POST to ``url``'s host (a private, loopback, link-local or
    reserved address, or none at all), else None. Checked again before each delivery, so a
    name that later resolves elsewhere is refused then."""
    if settings.HANDOFF_A2A_PUSH_ALLOW_PRIVATE or await validate_push_notification_url(url):
        return None
    return (f"The push URL's host {urlsplit(url).hostname} is a private, loopback, link-local or "
            f"reserved address, or does not resolve: this server sends notifications to public "
            f"addresses only. Use a receiver reachable on the internet.")


async def check_config(config: TaskPushNotificationConfig) -> None:
    """InvalidParams saying what to fix, unless ``config`` may be stored."""
    problem = config_problem(config) or await address_problem(config.url)
    if problem:
        raise InvalidParamsError(problem)


async def checked_config(task_id: str, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    """``config`` for ``task_id`` as it will be stored (its id defaults to the task's)."""
    if not task_id:
        raise InvalidParamsError("Name the task the push notification config is for (taskId).")
    normalized = normalize_push_notification_config(task_id, config)
    await check_config(normalized)
    return normalized


def as_proto(row: TaskPushConfig) -> TaskPushNotificationConfig:
    config = TaskPushNotificationConfig(id=row.config_id, task_id=row.task_id, url=row.url, token=row.token)
    if row.auth_scheme:
        config.authentication.CopyFrom(AuthenticationInfo(scheme=row.auth_scheme,
                                                          credentials=row.auth_credentials))
    return config


def own_task(user: Any, task_id: str) -> Run:
    """The caller's own task ``task_id`` (TaskNotFound for anyone else's)."""
    run = Run.objects.filter(pk=task_id, parent__isnull=True, owner=user).first()
    if run is None:
        raise TaskNotFoundError(f"No task {task_id} of yours; push notifications are set on your own tasks.")
    return run


def config_save(user: Any, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    """Store a checked config (replacing the caller's config of the same id on the task)."""
    with transaction.atomic():
        run = own_task(user, config.task_id)
        configs = TaskPushConfig.objects.filter(task=run)
        existing = configs.select_for_update().filter(config_id=config.id).first()
        if existing is None and configs.count() >= MAX_CONFIGS_PER_TASK:
            raise InvalidParamsError(f"Task {run.pk} has {MAX_CONFIGS_PER_TASK} push notification "
                                     f"configs already; delete one first.")
        row, _ = TaskPushConfig.objects.update_or_create(
            task=run, config_id=config.id,
            defaults={"owner": user, "url": config.url, "token": config.token,
                      "auth_scheme": config.authentication.scheme,
                      "auth_credentials": config.authentication.credentials})
    return as_proto(row)


def configs_of(user: Any, task_id: str) -> list[TaskPushNotificationConfig]:
    run = own_task(user, task_id)
    return [as_proto(row) for row in TaskPushConfig.objects.filter(task=run, owner=user)]


def config_delete(user: Any, task_id: str, config_id: str | None) -> None:
    run = own_task(user, task_id)
    rows = TaskPushConfig.objects.filter(task=run, owner=user)
    if config_id is not None:
        rows = rows.filter(config_id=config_id)
    deleted, _ = rows.delete()
    if config_id is not None and not deleted:
        raise TaskNotFoundError(f"Task {task_id} has no push notification config {config_id!r}; "
                                f"ListTaskPushNotificationConfigs lists those it has.")


def configs_for_dispatch(task_id: str) -> list[TaskPushNotificationConfig]:
    return [as_proto(row) for row in TaskPushConfig.objects.filter(task_id=task_id)]


def caller(context: ServerCallContext) -> Any:
    return context.state["django_user"]


class TaskPushConfigStore(PushNotificationConfigStore):
    """The SDK's config store over ``TaskPushConfig`` rows, the caller being the Django user
    the ASGI gate authenticated."""

    async def set_info(self, task_id: str, notification_config: TaskPushNotificationConfig,
                       context: ServerCallContext) -> TaskPushNotificationConfig:
        config = await checked_config(task_id, notification_config)
        return await sync_to_async(config_save)(caller(context), config)

    async def get_info(self, task_id: str, context: ServerCallContext) -> list[TaskPushNotificationConfig]:
        return await sync_to_async(configs_of)(caller(context), task_id)

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return await sync_to_async(configs_for_dispatch)(task_id)

    async def delete_info(self, task_id: str, context: ServerCallContext,
                          config_id: str | None = None) -> None:
        await sync_to_async(config_delete)(caller(context), task_id, config_id)
