"""The tree editor's pages: a delegation and its child delegations drawn as a tree, with
a child added, renamed, moved or removed, each change undone and redone, and the whole
tree run.

The picture is :mod:`.tree`'s; every change goes through :mod:`.services`, so each one
is a kept version and a stale one is refused, undoing and redoing included. Each action
is a plain POST that redirects to the tree; under htmx it answers with the tree panel instead.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.validators import MaxValueValidator
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from delegations.accounts.roles import can_compose
from delegations.models import Delegation
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lint import Severity
from delegations.protocol.packet import SUBAGENT_TYPES, parse_packet
from delegations.run_pages.forms import PASTE_LIMIT
from delegations.runs.workflows import RunError

from .forms import AdapterForm, ComposerForm
from .services import (
    NAME_MAX,
    DelegationError,
    StaleSave,
    composed_packet,
    delegation_create,
    delegation_start_run,
    delegation_update,
    plant_children,
    split_planned,
)
from .tree import SHOWN_AXES, TreeNode, child_packet, load_tree, unique_label
from .tree_history import TreeHistory, apply_entry, move, save_fields, sibling_index, take_out

COMPOSE_REFUSED = ("Editing a delegation's tree needs the composer role. Ask an admin to add you to "
                   "the “composers” group.")
HOW_IT_RUNS = ("Starting the root starts one run. Each child is offered to its parent's model by its "
               "label; when the parent delegates to it, the child runs with the contract composed "
               "here, narrowed to what the parent has left.")


# -- lookups scoped to the person asking ------------------------------------------------------

def _get_root_for_user(request: HttpRequest, delegation_id: int) -> Delegation:
    if not can_compose(request.user):
        raise PermissionDenied(COMPOSE_REFUSED)
    root = Delegation.objects.visible_to(request.user).filter(pk=delegation_id).first()
    if root is None:
        raise Http404(f"No delegation {delegation_id} that you can see.")
    return root


def _node_in_tree(request: HttpRequest, delegation_id: int, node_id: int) -> tuple[Delegation, TreeNode, TreeNode]:
    """The tree's root (the person's own), the tree as it is now, and one node of it."""
    root = _get_root_for_user(request, delegation_id)
    tree = load_tree(root)
    return root, tree, _get_node(tree, node_id)


def _get_node(tree: TreeNode, node_id: int) -> TreeNode:
    node = tree.find(node_id)
    if node is None:
        raise Http404(f"No delegation {node_id} in this tree.")
    return node


# -- the forms ------------------------------------------------------------------------------------

class NodeEditForm(forms.Form):
    """A node's name and goal, saved on top of the version the page showed."""

    name = forms.CharField(max_length=NAME_MAX)
    goal = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    base_version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)


class ChildForm(forms.Form):
    """A new child under ``parent``: its budget within what the parent has left after its
    other children, its capabilities a subset of the parent's."""

    name = forms.CharField(max_length=NAME_MAX)
    label = forms.SlugField(required=False, max_length=80,
                            help_text="The name the parent's model delegates to; made from the name when empty.")
    subagent_type = forms.ChoiceField(label="Role", required=False,
                                      choices=[("", "No role"), *((role, role) for role in SUBAGENT_TYPES)])
    goal = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    max_model_calls = forms.IntegerField(label="Model calls", required=False, min_value=0)
    max_tokens = forms.IntegerField(label="Tokens", required=False, min_value=0)
    max_cost_usd = forms.FloatField(label="Cost (USD)", required=False, min_value=0)
    capabilities = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args: Any, parent: TreeNode, **kwargs: Any) -> None:
        kwargs["auto_id"] = f"add-{parent.delegation.pk}-%s"   # one add form per node, ids unique
        super().__init__(*args, **kwargs)
        self.parent = parent
        self.fields["name"].widget.attrs["data-autofocus"] = ""
        for axis, figure in parent.left_for_a_new_child().items():
            field = self.fields[axis]
            field.initial = figure
            if figure is None:
                field.help_text = f"{parent.delegation.name} has no limit here; empty means no limit."
                continue
            field.widget.attrs["max"] = figure
            message = (f"{parent.delegation.name} has {figure:g} left after its other children; ask "
                       f"for {figure:g} or less, or leave it empty to take whatever is left.")
            field.validators.append(MaxValueValidator(figure, message=message))
            field.help_text = f"At most {figure:g}: what {parent.delegation.name} has left after its other children."
        capabilities = self.fields["capabilities"]
        assert isinstance(capabilities, forms.MultipleChoiceField)
        capabilities.choices = [(name, name) for name in parent.capabilities]
        capabilities.help_text = ("Only the parent's capabilities can be passed on; tick what this child needs."
                                  if parent.capabilities else f"{parent.delegation.name} has none to pass on.")

    def packet(self) -> dict[str, Any]:
        cleaned = self.cleaned_data
        taken = {child.label for child in self.parent.children}
        return child_packet(self.parent, goal=cleaned["goal"], role=cleaned["subagent_type"],
                            label=unique_label(cleaned["label"] or cleaned["name"], taken),
                            budget={axis: cleaned[axis] for axis, _ in SHOWN_AXES},
                            capabilities=cleaned["capabilities"])


# -- drawing ----------------------------------------------------------------------------------

def _tree_url(root: Delegation) -> str:
    return reverse("delegations:delegation_tree", args=[root.pk])


def _problem_links(tree: TreeNode, root: Delegation) -> list[dict[str, Any]]:
    anchors = ComposerForm()   # where the composer shows each packet field
    links = []
    for node in tree.walk():
        pk = node.delegation.pk
        for problem in node.problems():
            if problem.inline_field:
                href = f"{_tree_url(root)}?edit={pk}#edit-{pk}-{problem.inline_field}"
            else:
                anchor = anchors.anchor(problem.field)
                href = reverse("delegations:delegation_edit", args=[pk]) + (f"#{anchor}" if anchor else "")
            links.append({"problem": problem, "href": href})
    return links


def _page(request: HttpRequest, root: Delegation, *, status: int = 200, selected: int | None = None,
          **state: Any) -> HttpResponse:
    """The tree page (the tree panel alone under htmx) with ``state``: which node's edit
    form, add form or remove confirmation is open."""
    root.refresh_from_db()
    tree = load_tree(root)
    problems = _problem_links(tree, root)
    error_count = sum(link["problem"].severity == Severity.ERROR for link in problems)
    history = TreeHistory(request.session, root)
    last = history.undo[-1] if history.undo else None
    context = {
        "root": root, "tree": tree, "problems": problems, "tree_url": _tree_url(root),
        "error_count": error_count, "warning_count": len(problems) - error_count,
        "undo_what": last["what"] if last else "", "redo_what": history.redo[-1]["what"] if history.redo else "",
        "removed_name": last["subtree"]["name"] if last and last["kind"] == "remove" else "",
        "selected": selected or "",
        "adapter_form": AdapterForm(), "how_it_runs": HOW_IT_RUNS, "run_refusal": tree.run_refusal(),
        "tree_json": json.dumps(composed_packet(root, [node.delegation for node in tree.walk()][1:]),
                                indent=2, ensure_ascii=False),
        "edit_id": None, "edit_form": None, "stale": None, "add_id": None, "add_form": None,
        "remove_id": None, "json_typed": None, "json_error": "",
        "htmx_swap": bool(request.htmx), **state,  # type: ignore[attr-defined]
    }
    template = "delegations/composer/tree.html#tree" if request.htmx else "delegations/composer/tree.html"  # type: ignore[attr-defined]
    return render(request, template, context, status=status)


def _done(request: HttpRequest, root: Delegation, message: str, *, selected: int | None = None) -> HttpResponse:
    messages.success(request, message)
    if request.htmx:  # type: ignore[attr-defined]
        return _page(request, root, selected=selected)
    return redirect(_tree_url(root) + (f"#node-{selected}" if selected else ""))


def _refused(request: HttpRequest, root: Delegation, error: DelegationError) -> HttpResponse:
    messages.error(request, error.message)
    return _page(request, root, status=error.status)


def _step(request: HttpRequest, delegation_id: int, *, forward: bool) -> HttpResponse:
    """Undo the newest change (or redo the newest undone one), moving it to the other stack;
    one that can no longer be applied is said so and dropped."""
    root = _get_root_for_user(request, delegation_id)
    history = TreeHistory(request.session, root)
    stack, other = (history.redo, history.undo) if forward else (history.undo, history.redo)
    verb = "redo" if forward else "undo"
    if not stack:
        return _refused(request, root, DelegationError(f"There is nothing to {verb} in this tree.", status=404))
    entry = stack[-1]
    try:
        with transaction.atomic():
            selected = apply_entry(entry, forward=forward, tree=load_tree(root), user=request.user, history=history)
    except DelegationError as error:
        history = TreeHistory(request.session, root)   # forget what the failed step carried along
        (history.redo if forward else history.undo).pop()
        history.keep()
        return _refused(request, root, DelegationError(
            f"Could not {verb} {entry['what']}: {error.message} That step is dropped from the history.",
            status=error.status))
    other.append(stack.pop())
    history.keep()
    return _done(request, root, f"{'Redid' if forward else 'Undid'} {entry['what']}.", selected=selected)


# -- the pages --------------------------------------------------------------------------------

@require_GET
def delegation_tree(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """The tree; ``?edit=``, ``?add=`` or ``?remove=`` a node's id opens that form on it."""
    root = _get_root_for_user(request, delegation_id)
    state: dict[str, Any] = {f"{action}_id": int(request.GET[action]) for action in ("edit", "add", "remove")
                             if request.GET.get(action, "").isdigit()}
    selected = next(iter(state.values()), None)
    if "add_id" in state:
        state["add_form"] = ChildForm(parent=_get_node(load_tree(root), state["add_id"]))
    return _page(request, root, selected=selected, **state)


@require_POST
def tree_node_edit(request: HttpRequest, delegation_id: int, node_id: int) -> HttpResponse:
    root, _, node = _node_in_tree(request, delegation_id, node_id)
    form = NodeEditForm(request.POST)
    if not form.is_valid():
        return _page(request, root, status=422, edit_id=node_id, edit_form=form, selected=node_id)
    history = TreeHistory(request.session, root)
    before = {"name": node.delegation.name, "goal": node.goal}
    goal = form.cleaned_data["goal"].strip()
    try:
        saved = save_fields(node, {"name": form.cleaned_data["name"], "goal": goal}, request.user, history,
                             base_version=form.cleaned_data["base_version"])
    except StaleSave as stale:
        # what was typed stays, now based on the current version: saving again puts it on top
        data = request.POST.copy()
        data["base_version"] = str(stale.current_version)
        return _page(request, root, status=409, edit_id=node_id, edit_form=NodeEditForm(data), stale=stale,
                     selected=node_id)
    except DelegationError as error:
        field = error.details.get("field")
        form.add_error(field if field in form.fields else None, error.message)
        return _page(request, root, status=error.status, edit_id=node_id, edit_form=form, selected=node_id)
    after = {"name": saved.name, "goal": goal}
    if after != before:   # saving what was already there needs no undo
        what = (f"renaming {before['name']} to {saved.name}" if before["goal"] == goal
                else f"editing {saved.name}")
        history.record({"kind": "edit", "what": what, "node": [saved.pk, saved.version],
                        "before": before, "after": after})
    history.keep()
    return _done(request, root, f"Saved “{saved.name}” (version {saved.version}).", selected=node_id)


@require_POST
def tree_child_add(request: HttpRequest, delegation_id: int, node_id: int) -> HttpResponse:
    root, _, parent = _node_in_tree(request, delegation_id, node_id)
    if parent.child_refused:
        return _refused(request, root, DelegationError(parent.child_refused, status=422))
    form = ChildForm(request.POST, parent=parent)
    if not form.is_valid():
        return _page(request, root, status=422, add_id=node_id, add_form=form, selected=node_id)
    try:
        # the tree stays one owner's, also when a superuser edits someone else's
        child = delegation_create(owner=parent.delegation.owner, name=form.cleaned_data["name"],
                                  packet=form.packet(), parent=parent.delegation)
    except DelegationError as error:
        form.add_error(None, error.message)
        return _page(request, root, status=error.status, add_id=node_id, add_form=form, selected=node_id)
    history = TreeHistory(request.session, root)
    history.record({"kind": "add", "what": f"adding {child.name}", "node": [child.pk, child.version]})
    history.keep()
    return _done(request, root, f"Added {child.name} under {parent.delegation.name}.", selected=child.pk)


@require_POST
def tree_node_move(request: HttpRequest, delegation_id: int, node_id: int) -> HttpResponse:
    """Move a node one place ``up`` or ``down`` (the buttons, Alt+arrows), or ``to`` a place
    among its siblings (dragging it)."""
    root, tree, node = _node_in_tree(request, delegation_id, node_id)
    history = TreeHistory(request.session, root)
    index = sibling_index(tree, node)
    direction, to = request.POST.get("direction", ""), request.POST.get("to", "")
    if direction in ("up", "down"):
        target = index + (-1 if direction == "up" else 1)
    elif to.isdigit():
        target = int(to)
    else:
        return _refused(request, root, DelegationError(
            "Say where to move it: direction up or down, or to, its new place among its siblings (0 is first).",
            status=422))
    try:
        with transaction.atomic():
            move(tree, [node_id, node.delegation.version], target, request.user, history)
    except DelegationError as error:
        return _refused(request, root, error)
    where = direction or f"to place {target + 1}"
    history.record({"kind": "move", "what": f"moving {node.delegation.name} {where}",
                    "node": [node_id, node.delegation.version], "from": index, "to": target})
    history.keep()
    return _done(request, root, f"Moved {node.delegation.name} {where}.", selected=node_id)


@require_POST
def tree_node_remove(request: HttpRequest, delegation_id: int, node_id: int) -> HttpResponse:
    root, tree, node = _node_in_tree(request, delegation_id, node_id)
    history = TreeHistory(request.session, root)
    ref = [node_id, node.delegation.version]
    try:
        with transaction.atomic():
            taken = take_out(tree, ref, request.user, history)
    except DelegationError as error:
        return _refused(request, root, error)
    history.record({"kind": "remove", "what": f"removing {node.delegation.name}", "node": ref, **taken})
    history.keep()
    return _done(request, root, f"Removed {node.delegation.name}.", selected=taken["parent"])


@require_POST
def tree_undo(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """Undo the newest change made on this page (a removal puts the subtree back)."""
    return _step(request, delegation_id, forward=False)


@require_POST
def tree_redo(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """Make again the change undone last."""
    return _step(request, delegation_id, forward=True)


class TreeJsonForm(forms.Form):
    packet_json = forms.CharField(max_length=PASTE_LIMIT, label="The tree as one packet",
                                  widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "mono"}))
    base_version = forms.IntegerField(widget=forms.HiddenInput)


@require_POST
def tree_json(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """Apply the tree's JSON as edited: the root's packet, and its ``planned_children`` as
    the nodes under it (matched by label; each change a kept version; nodes the JSON does
    not name stay)."""
    root = _get_root_for_user(request, delegation_id)
    form = TreeJsonForm(request.POST)
    typed = request.POST.get("packet_json", "")

    def refused(message: str, status: int = 422) -> HttpResponse:
        """Said beside the JSON, which keeps what was typed (it was reset to the stored tree)."""
        return _page(request, root, status=status, json_typed=typed, json_error=message)

    if not form.is_valid():
        return refused("Paste the tree's JSON to apply it.")
    try:
        packet = parse_packet(form.cleaned_data["packet_json"]).to_dict()
    except ProtocolError as error:
        wrong = "; ".join(f"{issue.field or 'packet'}: {issue.message}" for issue in error.issues) or error.message
        return refused(f"Nothing changed: Handoff could not read that as a packet ({wrong}).")
    packet, planned = split_planned(packet)
    try:
        with transaction.atomic():
            if packet != root.packet_dict():
                delegation_update(delegation=root, user=request.user, packet=packet,
                                  base_version=form.cleaned_data["base_version"])
            changed = plant_children(parent=root, planned=planned, user=request.user)
    except DelegationError as error:
        return refused(f"Nothing changed: {error.message}", error.status)
    return _done(request, root, f"Applied the JSON to {root.name}: {changed} node{'s' if changed != 1 else ''} "
                                "under it added or changed. Each keeps its earlier versions.")


@require_POST
def tree_run(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """Start the root, with its children planned (one run; see :data:`HOW_IT_RUNS`)."""
    root = _get_root_for_user(request, delegation_id)
    refusal = load_tree(root).run_refusal()
    if refusal:   # the runner would only reject it
        messages.error(request, f"Not started. {refusal}")
        return redirect(_tree_url(root))
    form = AdapterForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(str(error) for error in errors)}" for name, errors in form.errors.items())
        messages.error(request, f"Not started. Fix the run settings first ({problems}).")
        return redirect(_tree_url(root))
    try:
        run = delegation_start_run(delegation=root, user=request.user, adapter=form.cleaned_data["adapter"],
                                   config=form.cleaned_data["adapter_config"])
    except (ProtocolError, DelegationError) as error:
        messages.error(request, f"Not started: {error.message}")
        return redirect(_tree_url(root))
    except RunError as error:  # too many runs wait to start: said on the tree page, with 429
        messages.error(request, error.message)
        return error.with_headers(_page(request, root, status=error.status))
    messages.success(request, f"Started {root.name} with its tree. This page follows the run live.")
    return redirect("delegations:run_detail", run_id=run.pk)
