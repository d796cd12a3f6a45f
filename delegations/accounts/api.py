"""REST route for who the request is authenticated as (``/api/me``)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from delegations.accounts.roles import can_approve, can_compose

router = Router(tags=["account"])


class MeOut(Schema):
    username: str
    is_staff: bool
    can_compose: bool
    can_approve: bool


@router.get("/me", response=MeOut, summary="Who the request is authenticated as")
def me(request: HttpRequest) -> MeOut:
    user = request.user
    return MeOut(username=user.get_username(), is_staff=user.is_staff,
                 can_compose=can_compose(user), can_approve=can_approve(user))
