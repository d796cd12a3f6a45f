from django.urls import path

from delegations import dashboard
from delegations.accounts import views as account
from delegations.inbox import views as inbox
from delegations.runs import views as runs

app_name = "delegations"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    # account and API tokens
    path("account/", account.account, name="account"),
    path("account/tokens/", account.token_create, name="token_create"),
    path("account/tokens/<int:token_id>/revoke/", account.token_revoke, name="token_revoke"),
    # runs
    path("runs/", runs.run_list, name="runs"),
    path("runs/new/", runs.run_new, name="run_new"),
    path("runs/<str:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<str:run_id>/live/", runs.run_live, name="run_live"),
    path("runs/<str:run_id>/cancel/", runs.run_cancel_view, name="run_cancel"),
    path("runs/<str:run_id>/messages/", runs.run_message_view, name="run_message"),
    path("runs/<str:run_id>/retry/", runs.run_retry_view, name="run_retry"),
    # the approval inbox, and deciding an item from its run's page
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/<int:approval_id>/decision/", inbox.inbox_decide, name="inbox_decide"),
    path("runs/<str:run_id>/approvals/<int:approval_id>/decision/", inbox.run_decide,
         name="run_decide"),
]
