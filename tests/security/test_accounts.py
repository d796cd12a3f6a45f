"""API tokens are stored hashed, shown once and revocable; websockets check the Origin;
the admin is for staff only."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from delegations.models import APIToken
from handoff_site.asgi import application

pytestmark = pytest.mark.django_db


def test_a_new_token_is_shown_once_and_only_its_digest_is_stored(client: Client, composer: Any) -> None:
    client.force_login(composer)
    created = client.post("/account/tokens/", {"name": "deploy"}).content.decode()
    raw = created.split("hnd_", 1)[1].split("<", 1)[0].split('"', 1)[0].strip()
    raw = "hnd_" + raw
    stored = APIToken.objects.get(user=composer, name="deploy")
    assert stored.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(list(APIToken.objects.values()))
    assert raw not in client.get("/account/").content.decode()       # never shown again
    assert client.get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 200


def test_a_revoked_token_gets_401_at_once(client: Client, composer: Any) -> None:
    token, raw = APIToken.issue(user=composer, name="ci")
    headers = {"Authorization": f"Bearer {raw}"}
    assert client.get("/api/me", headers=headers).status_code == 200
    browser = Client()
    browser.force_login(composer)
    assert browser.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert client.get("/api/me", headers=headers).status_code == 401


def test_a_token_of_a_deactivated_user_gets_401(client: Client, composer: Any) -> None:
    _, raw = APIToken.issue(user=composer, name="ci")
    composer.is_active = False
    composer.save()
    assert client.get("/api/me", headers={"Authorization": f"Bearer {raw}"}).status_code == 401


def test_nobody_can_revoke_someone_elses_token(client: Client, composer: Any, other_composer: Any) -> None:
    token, raw = APIToken.issue(user=composer, name="ci")
    client.force_login(other_composer)
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert APIToken.authenticate(raw) is not None


@pytest.mark.parametrize(("origin", "accepted"), [
    (b"http://localhost:8000", True),
    (b"http://127.0.0.1", True),
    (b"https://evil.example", False),
    (b"null", False),
])
async def test_a_websocket_from_a_foreign_origin_is_refused(origin: bytes, accepted: bool) -> None:
    communicator = WebsocketCommunicator(application, "/ws/inbox/",
                                         headers=[(b"origin", origin), (b"host", b"localhost")])
    connected, _ = await communicator.connect()
    if accepted:
        # an anonymous socket reaches the consumer, which closes it with 4401
        assert connected
        message = await communicator.receive_output(timeout=5)
        assert message == {"type": "websocket.close", "code": 4401}
    else:
        assert not connected                                 # refused before the consumer
    await communicator.disconnect()


def test_the_admin_is_for_staff_only(client: Client, composer: Any, approver: Any, admin_user: Any) -> None:
    pages = ["/admin/"] + [reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
                           for model in admin.site._registry]
    for user, allowed in ((None, False), (composer, False), (approver, False), (admin_user, True)):
        client.logout()
        if user is not None:
            client.force_login(user)
        for page in pages:
            response = client.get(page)
            assert response.status_code == (200 if allowed else 302), (page, user)
            if not allowed:
                assert response["Location"].startswith(("/admin/login/", "/accounts/login/"))
