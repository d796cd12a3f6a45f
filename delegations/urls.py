from django.urls import path

from .views import account, dashboard

app_name = "delegations"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    # account and API tokens
    path("account/", account.account, name="account"),
    path("account/tokens/", account.token_create, name="token_create"),
    path("account/tokens/<int:token_id>/revoke/", account.token_revoke, name="token_revoke"),
]
