from django.urls import path

from delegations import dashboard
from delegations.accounts import views as account
from delegations.composer import tree_views as tree
from delegations.composer import views as composer
from delegations.inbox import rule_views
from delegations.inbox import views as inbox
from delegations.run_pages import compare as run_compare
from delegations.run_pages import imports as run_imports
from delegations.run_pages import views as runs

app_name = "delegations"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    # account and API tokens
    path("account/", account.account, name="account"),
    path("account/tokens/", account.token_create, name="token_create"),
    path("account/tokens/<int:token_id>/revoke/", account.token_revoke, name="token_revoke"),
    # delegations: the list, the composer and its live lint panel
    path("delegations/", composer.delegation_list, name="delegation_list"),
    path("delegations/new/", composer.delegation_new, name="delegation_new"),
    path("delegations/lint/", composer.delegation_lint, name="delegation_lint"),
    path("delegations/fill/", composer.delegation_fill, name="delegation_fill"),
    path("delegations/<int:delegation_id>/", composer.delegation_edit, name="delegation_edit"),
    path("delegations/<int:delegation_id>/dry-run/", composer.delegation_dry_run, name="delegation_dry_run"),
    # a delegation's tree of child delegations, and what can be done to its nodes
    path("delegations/<int:delegation_id>/tree/", tree.delegation_tree, name="delegation_tree"),
    path("delegations/<int:delegation_id>/tree/run/", tree.tree_run, name="tree_run"),
    path("delegations/<int:delegation_id>/tree/json/", tree.tree_json, name="tree_json"),
    path("delegations/<int:delegation_id>/tree/undo/", tree.tree_undo, name="tree_undo"),
    path("delegations/<int:delegation_id>/tree/redo/", tree.tree_redo, name="tree_redo"),
    path("delegations/<int:delegation_id>/tree/<int:node_id>/edit/", tree.tree_node_edit, name="tree_node_edit"),
    path("delegations/<int:delegation_id>/tree/<int:node_id>/children/", tree.tree_child_add,
         name="tree_child_add"),
    path("delegations/<int:delegation_id>/tree/<int:node_id>/move/", tree.tree_node_move, name="tree_node_move"),
    path("delegations/<int:delegation_id>/tree/<int:node_id>/remove/", tree.tree_node_remove,
         name="tree_node_remove"),
    # runs
    path("runs/", runs.run_list, name="runs"),
    path("runs/new/", runs.run_new, name="run_new"),
    # runs exported on another instance, imported to be read here (listed before runs/<id>/,
    # which would take "import" for a run id)
    path("runs/import/", run_imports.run_import_view, name="run_import"),
    path("runs/imported/<int:imported_id>/", run_imports.run_imported, name="run_imported"),
    path("runs/imported/<int:imported_id>/download/", run_imports.run_imported_download,
         name="run_imported_download"),
    path("runs/<str:run_id>/", runs.run_detail, name="run_detail"),
    path("runs/<str:run_id>/live/", runs.run_live, name="run_live"),
    path("runs/<str:run_id>/replay/", runs.run_replay, name="run_replay"),
    path("runs/<str:run_id>/cancel/", runs.run_cancel_view, name="run_cancel"),
    path("runs/<str:run_id>/messages/", runs.run_message_view, name="run_message"),
    path("runs/<str:run_id>/retry/", runs.run_retry_view, name="run_retry"),
    path("runs/<str:run_id>/trace/", runs.run_trace_export_view, name="run_trace_export"),
    path("runs/<str:run_id>/compare/", run_compare.run_compare, name="run_compare"),
    # the approval inbox, and deciding an item from its run's page
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/history/", inbox.inbox_history, name="inbox_history"),
    path("inbox/batch/", inbox.inbox_batch, name="inbox_batch"),
    path("inbox/<int:approval_id>/item/", inbox.inbox_item, name="inbox_item"),
    path("inbox/<int:approval_id>/decision/", inbox.inbox_decide, name="inbox_decide"),
    path("runs/<str:run_id>/approvals/<int:approval_id>/decision/", inbox.run_decide,
         name="run_decide"),
    # approval rules: standing decisions of the inbox
    path("inbox/rules/", rule_views.rule_list, name="rule_list"),
    path("inbox/rules/new/", rule_views.rule_new, name="rule_new"),
    path("inbox/rules/<int:rule_id>/", rule_views.rule_edit, name="rule_edit"),
]
