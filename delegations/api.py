"""REST routes of the delegations app. Each resource has its router; ROUTERS lists them
for handoff_site/api.py as (attribute name, URL prefix)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

from .api_runs import approvals_router, protocol_router, runs_router
from .roles import can_approve, can_compose

account_router = Router(tags=["account"])


class MeOut(Schema):
    username: str
    is_staff: bool
    can_compose: bool
    can_approve: bool


@account_router.get("/me", response=MeOut, summary="Who the request is authenticated as")
def me(request: HttpRequest) -> MeOut:
    user = request.user
    return MeOut(username=user.get_username(), is_staff=user.is_staff,
                 can_compose=can_compose(user), can_approve=can_approve(user))


ROUTERS = [("account_router", ""), ("runs_router", "/runs"), ("approvals_router", "/approvals"),
           ("protocol_router", "/protocol")]
__all__ = ["ROUTERS", "account_router", "approvals_router", "protocol_router", "runs_router"]
