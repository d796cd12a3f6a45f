"""Composer pages: the delegation list, where a new delegation starts (from a skill, a
role, a shipped starter or a saved template), and the composer with its live lint panel,
its JSON view, saving and running from it, and a dry run of the one node on its own.

Linting is :func:`delegations.runs.lint.lint_as_run`'s, saving and running
:mod:`delegations.composer.services`'; these views build the packet from the form, call
them, and redirect. Every composer form also works as a plain POST: "Check" re-renders
the page with the findings, and htmx only refreshes the panel as the person types.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from delegations.accounts.roles import can_compose
from delegations.models import Delegation, RemoteAgent, Run
from delegations.protocol.a2a_client import RemoteAgentConfig
from delegations.protocol.a2a_subagents import parse_remote_ref
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lint import Severity
from delegations.protocol.packet import SUBAGENT_TYPES, parse_packet
from delegations.runs.lint import LintReport, lint_as_run
from delegations.runs.workflows import RunError
from skills.models import Skill

from .criteria_rows import KIND_PARAMS
from .dry_run import DryRunForm, default_script, start_dry_run
from .forms import (
    OTHER_FIELD,
    PACKET_FIELDS,
    AdapterForm,
    ComposerForm,
    ImportForm,
    ParentScope,
    initial_from_packet,
    new_initial,
    packet_from_form,
    remote_skill_initial,
)
from .services import (
    DelegationError,
    StaleSave,
    delegation_create,
    delegation_start_run,
    delegation_update,
    plant_children,
    split_planned,
)
from .starters import BY_KEY, STARTERS

PAGE_SIZE = 25
DRY_RUN_PREFIX = "dry-run"
COMPOSE_REFUSED = ("Composing delegations needs the composer role. Ask an admin to add you to the "
                   "“composers” group; meanwhile you can browse skills and watch runs.")
ROLE_SUMMARIES = {
    "coder": "Writes or changes code.", "researcher": "Finds things out and reports with sources.",
    "reviewer": "Reviews work and says what is wrong.", "executor": "Implements one planned task.",
    "planner": "Turns research into a plan of tasks.", "critic": "Challenges a plan before it is built.",
    "verifier": "Checks that a task was done as specified.",
}


def _require_composer(request: HttpRequest) -> None:
    if not can_compose(request.user):
        raise PermissionDenied(COMPOSE_REFUSED)


def _get_delegation_for_user(request: HttpRequest, delegation_id: int) -> Delegation:
    delegation = Delegation.objects.visible_to(request.user).filter(pk=delegation_id).first()
    if delegation is None:
        raise Http404(f"No delegation {delegation_id} that you can see.")
    return delegation


def _skill_named(ref: str) -> Skill | None:
    return Skill.objects.resolve(ref) if ref.strip() else None


def _template_for_user(request: HttpRequest, template_id: Any) -> Delegation | None:
    if not str(template_id or "").isdigit():
        return None
    return Delegation.objects.visible_to(request.user).filter(pk=int(template_id), template=True).first()


def _edit_url(delegation: Delegation) -> str:
    return reverse("delegations:delegation_edit", args=[delegation.pk])


# -- the list ------------------------------------------------------------------------------

def _listed(request: HttpRequest) -> tuple[QuerySet[Delegation], dict[str, str]]:
    filters = {"q": request.GET.get("q", "").strip(),
               "owner": "all" if request.GET.get("owner") == "all" else "mine",
               "template": "1" if request.GET.get("template") == "1" else ""}
    rows = Delegation.objects.visible_to(request.user).select_related("owner", "updated_by")
    if filters["q"]:
        rows = rows.filter(Q(name__icontains=filters["q"]) | Q(description__icontains=filters["q"]))
    if filters["owner"] == "mine":
        rows = rows.filter(owner=request.user.pk)
    if filters["template"]:
        rows = rows.filter(template=True)
    last_runs = Run.objects.filter(delegation=OuterRef("pk")).order_by("-created_at")
    rows = rows.annotate(uses=Count("copies"), last_run_id=Subquery(last_runs.values("pk")[:1]),
                         last_run_state=Subquery(last_runs.values("state")[:1]))
    return rows.order_by("-updated_at"), filters   # a count drops the model's own ordering


@require_GET
def delegation_list(request: HttpRequest) -> HttpResponse:
    rows, filters = _listed(request)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "delegations/composer/delegation_list.html", {
        "page": page, "filters": filters, "filtered": bool(filters["q"] or filters["template"]),
        "can_compose": can_compose(request.user), "sees_others": request.user.is_superuser,
    })


# -- the composer ----------------------------------------------------------------------------

def delegation_new(request: HttpRequest) -> HttpResponse:
    _require_composer(request)
    if request.method == "POST":
        return _composer_post(request, None)
    if "starter" in request.GET or "template" in request.GET:
        return _new_from_template(request)
    ref, role = request.GET.get("skill", ""), request.GET.get("role", "")
    skill = _skill_named(ref)
    remote = RemoteAgent.objects.offering(ref) if skill is None else None
    if remote is not None:
        initial = remote_skill_initial(ref, remote)
        return _render(request, ComposerForm(initial=initial), packet=packet_from_form(initial))
    if ref and skill is None:
        offered_by = " and no enabled remote agent offers it" if parse_remote_ref(ref) else ""
        messages.warning(request, f"No skill {ref} in the registry{offered_by}; pick another, or start from a role.")
    if skill is None and role not in SUBAGENT_TYPES:
        return _start_page(request)
    initial = new_initial(skill, role)
    return _render(request, ComposerForm(skill=skill, initial=initial), packet=packet_from_form(initial))


def _start_page(request: HttpRequest) -> HttpResponse:
    templates = (Delegation.objects.visible_to(request.user).filter(template=True)
                 .annotate(uses=Count("copies")).order_by("name"))
    return render(request, "delegations/composer/start.html", {
        "starters": STARTERS, "templates": templates,
        "skills": Skill.objects.latest_versions().order_by("name")[:50],
        "roles": [(name, ROLE_SUMMARIES[name]) for name in SUBAGENT_TYPES]})


def _new_from_template(request: HttpRequest) -> HttpResponse:
    """The composer filled from a starter (``?starter=key``) or a saved template
    (``?template=id``); a copy of a saved template remembers it when saved."""
    starter = BY_KEY.get(request.GET.get("starter", ""))
    if starter is not None:
        form, packet = _form_for(starter.packet_copy(), name=starter.title)
        return _render(request, form, packet=packet)
    template = _template_for_user(request, request.GET.get("template"))
    if template is not None:
        form, packet = _form_for(template.packet_dict(), name=template.name, copied_from=template.pk)
        return _render(request, form, packet=packet)
    messages.warning(request, "That template is not one you can use; pick one of these.")
    return _start_page(request)


def delegation_edit(request: HttpRequest, delegation_id: int) -> HttpResponse:
    _require_composer(request)
    delegation = _get_delegation_for_user(request, delegation_id)
    if request.method == "POST":
        return _composer_post(request, delegation)
    form, packet = _saved_form(delegation)
    return _render(request, form, delegation=delegation, packet=packet)


def _saved_form(delegation: Delegation) -> tuple[ComposerForm, dict[str, Any]]:
    """The form filled with the delegation as saved, and its packet in canonical form."""
    return _form_for(delegation.packet_dict(), delegation=delegation, name=delegation.name,
                     template=delegation.template, base_version=delegation.version)


def _form_for(stored: dict[str, Any], *, delegation: Delegation | None = None,
              **fields: Any) -> tuple[ComposerForm, dict[str, Any]]:
    """The form filled with a packet in any dialect and ``fields`` (name, template...), and
    the packet in canonical form."""
    initial: dict[str, Any]
    try:
        packet = parse_packet(stored).to_dict()
    except ProtocolError:
        # shown as it is; the lint panel says why it does not parse
        packet, initial = stored, {OTHER_FIELD: stored}
    else:
        initial = initial_from_packet(packet)
    initial.update(fields)
    return ComposerForm(skill=_skill_named(str(packet.get("skill") or "")), initial=initial,
                        parent=_parent_scope(delegation)), packet


@require_POST
def delegation_lint(request: HttpRequest) -> HttpResponse:
    """The live lint panel, for the form as it stands (htmx posts it as the person types)."""
    _require_composer(request)
    delegation_id = request.GET.get("delegation", "")
    delegation = _get_delegation_for_user(request, int(delegation_id)) if delegation_id.isdigit() else None
    form = ComposerForm(request.POST, skill=_skill_named(request.POST.get("skill", "")),
                        parent=_parent_scope(delegation))
    adapter_form = AdapterForm(request.POST) if "adapter" in request.POST else None
    return render(request, "delegations/composer/_lint_panel.html",
                  _panel_context(form, _lint(form, delegation), adapter_form))


def _composer_post(request: HttpRequest, delegation: Delegation | None) -> HttpResponse:
    action = request.POST.get("action", "check")
    if action == "import":
        return _import(request, delegation)
    form = ComposerForm(request.POST, skill=_skill_named(request.POST.get("skill", "")),
                        parent=_parent_scope(delegation))
    adapter_form = AdapterForm(request.POST)
    report = _lint(form, delegation)
    valid = form.is_valid()
    if not valid and action in ("save", "run"):
        count = sum(len(errors) for errors in form.errors.values())
        messages.error(request, f"Not saved{' or started' if action == 'run' else ''}: {count} field"
                                f"{'s' if count > 1 else ''} below cannot be stored as "
                                f"{'they are' if count > 1 else 'it is'}. Fix "
                                f"{'them' if count > 1 else 'it'} and save again; the rest is kept.")
    if valid and action == "save":
        return _save_and_maybe_run(request, form, adapter_form, delegation, report, run=False)
    if valid and action == "run":
        if report.runnable and adapter_form.is_valid():
            return _save_and_maybe_run(request, form, adapter_form, delegation, report, run=True)
        if not report.runnable:
            messages.error(request, f"Not started. {report.blocked_because}")
        elif not adapter_form.is_valid():
            problems = "; ".join(f"{_form_label(adapter_form, name)}: {' '.join(map(str, errors))}"
                                 for name, errors in adapter_form.errors.items())
            messages.error(request, f"Not started: the model's settings are not usable ({problems}). "
                                    f"Fix them beside Save and run, at the end of the form.")
    if valid and action == "check":
        # a fresh form from the packet: what was typed, with an empty criterion row again
        initial = {**initial_from_packet(packet_from_form(form.cleaned_data)),
                   **{key: form.cleaned_data[key] for key in ("name", "template", "base_version", "copied_from")}}
        form = ComposerForm(skill=form.skill, initial=initial, parent=form.parent)
    return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                   status=200 if action == "check" else 422)


def _form_label(form: forms.Form, name: str) -> str:
    """How a person knows the field ``name`` of ``form`` (its label; "the form" for errors of no field)."""
    return str(form.fields[name].label or name) if name in form.fields else "the form"


def _save_and_maybe_run(request: HttpRequest, form: ComposerForm, adapter_form: AdapterForm,
                        delegation: Delegation | None, report: LintReport, *, run: bool) -> HttpResponse:
    cleaned = form.cleaned_data
    # a tree pasted as one packet: its planned children become the nodes of its tree
    packet, planned = split_planned(packet_from_form(cleaned))
    name = form.delegation_name() if run else cleaned["name"]
    linted = None if planned else report   # the page linted this very packet already
    try:
        with transaction.atomic():
            if delegation is None:
                delegation = delegation_create(owner=request.user, name=name, packet=packet,
                                               template=cleaned["template"], linted=linted,
                                               copied_from=_template_for_user(request, cleaned["copied_from"]))
            else:
                delegation = delegation_update(delegation=delegation, user=request.user, name=name, packet=packet,
                                               template=cleaned["template"], base_version=cleaned["base_version"] or 0,
                                               linted=linted)
            planted = plant_children(parent=delegation, planned=planned, user=request.user)
    except StaleSave as stale:
        # keep what was typed, now based on the current version, so saving again overwrites
        data = request.POST.copy()
        data["base_version"] = str(stale.current_version)
        form = ComposerForm(data, skill=form.skill, parent=form.parent)
        form.is_valid()
        return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                       stale=stale, status=409)
    except DelegationError as error:
        field = error.details.get("field")
        form.add_error(field if field in form.fields else None, error.message)
        return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                       status=error.status)
    if planted:
        messages.info(request, f"Its planned children are nodes of its tree now ({planted} added or changed); "
                               "open the tree to see and edit them.")
    if not run:
        messages.success(request, f"Saved “{delegation.name}” (version {delegation.version}).")
        return redirect(_edit_url(delegation))
    try:
        started = delegation_start_run(delegation=delegation, user=request.user,
                                       adapter=adapter_form.cleaned_data["adapter"],
                                       config=adapter_form.cleaned_data["adapter_config"])
    except (ProtocolError, DelegationError) as error:
        messages.error(request, f"Saved as version {delegation.version}, but not started: {error.message}")
        return redirect(_edit_url(delegation))
    except RunError as error:  # too many runs wait to start: said on the saved page, with 429
        messages.error(request, f"Saved as version {delegation.version}. {error.message}")
        form, packet = _saved_form(delegation)
        return error.with_headers(_render(request, form, delegation=delegation, packet=packet,
                                          adapter_form=adapter_form, status=error.status))
    messages.success(request, f"Saved “{delegation.name}” (version {delegation.version}) and started it. "
                              "This page follows the run live.")
    return redirect("delegations:run_detail", run_id=started.pk)


def _read_import(request: HttpRequest) -> tuple[ImportForm, dict[str, Any] | None, list[dict[str, str]]]:
    """The packet pasted or uploaded in any dialect, in canonical form, or what did not fit."""
    import_form = ImportForm(request.POST, request.FILES)
    if not import_form.is_valid():
        return import_form, None, []
    try:
        packet = parse_packet(import_form.cleaned_data["packet_json"]).to_dict()
    except ProtocolError as error:
        return import_form, None, [issue.as_dict() for issue in error.issues] or [{"field": "", "message": error.message}]
    return import_form, packet, []


def _filled_form(request: HttpRequest, packet: dict[str, Any], delegation: Delegation | None) -> ComposerForm:
    """The form filled from ``packet``, keeping what the packet does not hold: the
    delegation's name, its template flag, the version it is based on and its template."""
    keep = {"name": request.POST.get("name", ""), "template": bool(request.POST.get("template")),
            "base_version": request.POST.get("base_version") or None,
            "copied_from": request.POST.get("copied_from") or None}
    return ComposerForm(skill=_skill_named(str(packet.get("skill") or "")),
                        initial={**initial_from_packet(packet), **keep}, parent=_parent_scope(delegation))


def _held_packet(request: HttpRequest) -> dict[str, Any] | None:
    """What the form held when a packet file that does not read was uploaded: the JSON
    view's text, which follows the form (None when nothing was uploaded, or it does not read)."""
    text = request.POST.get("packet_json", "")
    if "packet_file" not in request.FILES or not text.strip():
        return None
    try:
        return parse_packet(text).to_dict()
    except ProtocolError:
        return None


def _import(request: HttpRequest, delegation: Delegation | None) -> HttpResponse:
    """Fill the form from a packet pasted or uploaded in any dialect (the JSON view's
    "Fill the form" without scripts; with them, :func:`delegation_fill` does it as one types)."""
    import_form, packet, problems = _read_import(request)
    if packet is not None:
        messages.info(request, "The form is filled from the packet. Nothing is saved until you save.")
        return _render(request, _filled_form(request, packet, delegation), delegation=delegation, packet=packet)
    held = _held_packet(request)
    if held is not None:
        form, packet = _filled_form(request, held, delegation), held
    elif delegation is not None:
        form, packet = _saved_form(delegation)
    else:
        packet = packet_from_form(new_initial())
        form = ComposerForm(initial=new_initial())
    return _render(request, form, delegation=delegation, packet=packet,
                   import_form=import_form, import_problems=problems, status=422)


@require_POST
def delegation_fill(request: HttpRequest) -> HttpResponse:
    """The composer's form re-drawn from the JSON view as the person edits the packet there
    (the JSON view posts it with the form's own fields). A packet that does not read answers
    422 with what did not fit, and the form stays as it is."""
    _require_composer(request)
    delegation_id = request.GET.get("delegation", "")
    delegation = _get_delegation_for_user(request, int(delegation_id)) if delegation_id.isdigit() else None
    import_form, packet, problems = _read_import(request)
    if packet is None:
        return render(request, "delegations/composer/composer.html#json_problems",
                      {"import_form": import_form, "import_problems": problems}, status=422)
    return _render(request, _filled_form(request, packet, delegation), delegation=delegation, packet=packet,
                   adapter_form=AdapterForm(request.POST), template="delegations/composer/composer.html#composer_form")


# -- a dry run of one node ------------------------------------------------------------------

@require_POST
def delegation_dry_run(request: HttpRequest, delegation_id: int) -> HttpResponse:
    """Run the delegation on its own, as saved, without its children: a real run, labelled
    as a dry run, whose page checks the result against the schema and the criteria."""
    _require_composer(request)
    delegation = _get_delegation_for_user(request, delegation_id)
    dry_run_form = DryRunForm(request.POST, prefix=DRY_RUN_PREFIX)
    refusal: RunError | None = None
    if dry_run_form.is_valid():
        try:
            run = start_dry_run(delegation=delegation, user=request.user,
                                adapter=dry_run_form.cleaned_data["adapter"],
                                config=dry_run_form.cleaned_data["adapter_config"])
        except ProtocolError as error:
            field = dry_run_form.config_field() if error.code == ErrorCode.INVALID_ADAPTER_CONFIG else None
            dry_run_form.add_error(field, f"Not started. {error.message}")
        except RunError as error:  # too many runs wait to start
            dry_run_form.add_error(None, error.message)
            refusal = error
        else:
            messages.success(request, f"Started a dry run of {delegation.name} on its own, without its "
                                      "children. This page follows it live.")
            return redirect("delegations:run_detail", run_id=run.pk)
    form, packet = _saved_form(delegation)
    response = _render(request, form, delegation=delegation, packet=packet, dry_run_form=dry_run_form,
                       status=refusal.status if refusal else 422)
    return refusal.with_headers(response) if refusal else response


# -- linting and drawing -------------------------------------------------------------------

def _parent_packet(delegation: Delegation | None) -> dict[str, Any] | None:
    """The packet of the delegation above this one in its tree, which lint compares it with."""
    parent = delegation.parent if delegation is not None else None
    return parent.packet_dict() if parent is not None else None


def _parent_scope(delegation: Delegation | None) -> ParentScope | None:
    """What the delegation's parent in its tree has, which the form keeps it within."""
    parent = delegation.parent if delegation is not None else None
    if parent is None:
        return None
    packet = lint_as_run(parent.packet_dict()).packet or parent.packet_dict()
    return ParentScope(parent.name, tuple(packet.get("capabilities") or ()))


def _lint(form: ComposerForm, delegation: Delegation | None) -> LintReport:
    """The report for a bound form: the form's own errors come first, as problems, and what
    did clean is linted as the packet it stands for."""
    valid = form.is_valid()
    packet = packet_from_form(form.cleaned_data)
    report = lint_as_run(packet, parent=_parent_packet(delegation))
    if valid:
        return report
    # an input the field cannot show as it is (42 where the skill wants text) is kept in
    # "Other packet fields": the skill's check of that value speaks for the empty field
    problems = [{"field": _packet_path(form, name), "message": str(message)}
                for name, errors in form.errors.items() if not _kept_in_other(form, name, packet)
                for message in errors]
    return _said_once(form, report, problems)


def _said_once(form: ComposerForm, report: LintReport,
               problems: list[dict[str, str]]) -> LintReport:
    """The report with the form's ``problems`` first, and nothing else about the fields
    they name: a value the form refused is missing from the packet, and the skill's input
    check or lint would say so again ("'review' is a required property", GOAL_MISSING
    beside "Write the goal")."""
    named = {form.anchor(problem["field"]) for problem in problems}
    return replace(
        report,
        problems=problems + [p for p in report.problems if form.anchor(p["field"]) not in named],
        findings=[f for f in report.findings if form.anchor(f["field"]) not in named])


def _kept_in_other(form: ComposerForm, name: str, packet: dict[str, Any]) -> bool:
    path = form.input_fields.paths.get(name) if form.input_fields is not None else None
    value: Any = packet.get("input_data")
    for key in path or ():
        value = value.get(key) if isinstance(value, dict) else None
    return path is not None and value is not None


def _packet_path(form: ComposerForm, name: str) -> str:
    """Where form field ``name`` sits in the packet, named as lint names fields
    (``input_data.review``, ``budget.max_tokens``)."""
    if name == "__all__":
        return "success_criteria"
    if form.input_fields is not None and name in form.input_fields.paths:
        return ".".join(("input_data", *form.input_fields.paths[name]))
    return name.replace("__", ".")


def _unbound_report(form: ComposerForm, packet: dict[str, Any], delegation: Delegation | None) -> LintReport:
    report = lint_as_run(packet, parent=_parent_packet(delegation))
    missing = [{"field": spec.name, "message": f"Write the {spec.name.replace('_', ' ')}; it is required."}
               for spec in PACKET_FIELDS if form.fields[spec.name].required and not form[spec.name].value()]
    return _said_once(form, report, missing) if missing else report


def _panel_context(form: ComposerForm, report: LintReport, adapter_form: AdapterForm | None = None) -> dict[str, Any]:
    """The check panel's findings; ``adapter_form`` (the model's settings beside Save and
    run, as typed) adds what keeps them from starting a run."""
    groups: dict[str, list[dict[str, str]]] = {str(severity): [] for severity in Severity}
    for problem in report.problems:
        groups[Severity.ERROR].append({**problem, "code": "", "anchor": form.anchor(problem["field"])})
    adapter_blocked = ""
    if adapter_form is not None and adapter_form.is_bound and not adapter_form.is_valid():
        for name, messages in adapter_form.errors.items():
            groups[Severity.ERROR].append({"field": name, "code": "", "message": " ".join(map(str, messages)),
                                           "anchor": f"id_{name}" if name in adapter_form.fields else ""})
        adapter_blocked = "Fix the model's settings beside Save and run before starting it."
    for finding in report.findings:
        groups[finding["severity"]].append({**finding, "anchor": form.anchor(finding["field"])})
    packet_json = json.dumps(report.packet, indent=2, ensure_ascii=False) if report.packet else ""
    errors, warnings, infos = groups[Severity.ERROR], groups[Severity.WARNING], groups[Severity.INFO]
    return {"report": report, "errors": errors, "warnings": warnings, "infos": infos,
            "finding_groups": [("Errors", "error", errors), ("Warnings", "warning", warnings),
                               ("Suggestions", "info", infos)],
            "packet_json": packet_json, "form_id": "composer", "adapter_blocked": adapter_blocked}


def _remote_skill_of(form: ComposerForm) -> RemoteAgentConfig | None:
    """The remote agent whose skill the form names, if one offers it; its goal field then
    says that the goal is what the agent is sent."""
    ref = str(form["skill"].value() or "")
    agent = RemoteAgent.objects.offering(ref) if form.skill is None else None
    if agent is not None:
        form.fields["goal"].widget.attrs.setdefault(
            "placeholder", f"What to ask {agent.name}: sent to it as the message, with the input as data, "
                           f"e.g. “Quote the current price of TSLA in USD”.")
    return agent


def _render(request: HttpRequest, form: ComposerForm, *, packet: dict[str, Any] | None = None,
            report: LintReport | None = None, adapter_form: AdapterForm | None = None,
            delegation: Delegation | None = None, stale: StaleSave | None = None,
            import_form: ImportForm | None = None, import_problems: list[dict[str, str]] | None = None,
            dry_run_form: DryRunForm | None = None, status: int = 200,
            template: str = "delegations/composer/composer.html") -> HttpResponse:
    if report is None:
        report = _unbound_report(form, packet or {}, delegation)
    if delegation is not None and dry_run_form is None:
        dry_run_form = DryRunForm(prefix=DRY_RUN_PREFIX,
                                  initial={"adapter": "scripted", "script": default_script(report.packet or {})})
    query = f"?delegation={delegation.pk}" if delegation else ""
    panel = _panel_context(form, report, adapter_form)
    remote_skill = _remote_skill_of(form)
    context = {
        "form": form, "skill": form.skill, "remote_skill": remote_skill, "adapter_form": adapter_form or AdapterForm(), "delegation": delegation,
        "stale": stale, "import_problems": import_problems or [],
        "import_form": import_form or ImportForm(initial={"packet_json": panel["packet_json"]}),
        "action_url": _edit_url(delegation) if delegation else reverse("delegations:delegation_new"),
        "lint_url": reverse("delegations:delegation_lint") + query,
        "fill_url": reverse("delegations:delegation_fill") + query,
        "kind_params": KIND_PARAMS, "dry_run_form": dry_run_form, **panel,
    }
    return render(request, template, context, status=status)
