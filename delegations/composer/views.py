"""Composer pages: the delegation list, where a new delegation starts, and the composer
with its live lint panel, its JSON view, and saving and running from it.

Linting is :func:`delegations.composer.lint.lint_report`'s, saving and running
:mod:`delegations.composer.services`'; these views build the packet from the form, call
them, and redirect. Every composer form also works as a plain POST: "Check" re-renders
the page with the findings, and htmx only refreshes the panel as the person types.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from delegations.accounts.roles import can_compose
from delegations.models import Delegation
from delegations.protocol.errors import ProtocolError
from delegations.protocol.lint import Severity
from delegations.protocol.packet import SUBAGENT_TYPES, parse_packet
from skills.models import Skill

from .forms import (
    KIND_PARAMS,
    OTHER_FIELD,
    PACKET_FIELDS,
    AdapterForm,
    ComposerForm,
    ImportForm,
    initial_from_packet,
    new_initial,
    packet_from_form,
)
from .lint import LintReport, lint_report
from .services import (
    DelegationError,
    StaleSave,
    delegation_create,
    delegation_start_run,
    delegation_update,
)

PAGE_SIZE = 25
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
    return rows, filters


@require_GET
def delegation_list(request: HttpRequest) -> HttpResponse:
    rows, filters = _listed(request)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "delegations/delegation_list.html", {
        "page": page, "filters": filters, "filtered": bool(filters["q"] or filters["template"]),
        "can_compose": can_compose(request.user), "sees_others": request.user.is_superuser,
    })


# -- the composer ----------------------------------------------------------------------------

def delegation_new(request: HttpRequest) -> HttpResponse:
    _require_composer(request)
    if request.method == "POST":
        return _composer_post(request, None)
    ref, role = request.GET.get("skill", ""), request.GET.get("role", "")
    skill = _skill_named(ref)
    if ref and skill is None:
        messages.warning(request, f"No skill {ref} in the registry; pick another, or start from a role.")
    if skill is None and role not in SUBAGENT_TYPES:
        return render(request, "delegations/composer_start.html", {
            "skills": Skill.objects.latest_versions().order_by("name")[:50],
            "roles": [(name, ROLE_SUMMARIES[name]) for name in SUBAGENT_TYPES]})
    initial = new_initial(skill, role)
    return _render(request, ComposerForm(skill=skill, initial=initial), packet=packet_from_form(initial))


def delegation_edit(request: HttpRequest, delegation_id: int) -> HttpResponse:
    _require_composer(request)
    delegation = _get_delegation_for_user(request, delegation_id)
    if request.method == "POST":
        return _composer_post(request, delegation)
    form, packet = _saved_form(delegation)
    return _render(request, form, delegation=delegation, packet=packet)


def _saved_form(delegation: Delegation) -> tuple[ComposerForm, dict[str, Any]]:
    """The form filled with the delegation as saved, and its packet in canonical form."""
    stored = delegation.packet_dict()
    initial: dict[str, Any]
    try:
        packet = parse_packet(stored).to_dict()
    except ProtocolError:
        # shown as it is; the lint panel says why it does not parse
        packet, initial = stored, {OTHER_FIELD: stored}
    else:
        initial = initial_from_packet(packet)
    initial.update(name=delegation.name, template=delegation.template, base_version=delegation.version)
    return ComposerForm(skill=_skill_named(str(packet.get("skill") or "")), initial=initial), packet


@require_POST
def delegation_lint(request: HttpRequest) -> HttpResponse:
    """The live lint panel, for the form as it stands (htmx posts it as the person types)."""
    _require_composer(request)
    form = ComposerForm(request.POST, skill=_skill_named(request.POST.get("skill", "")))
    delegation_id = request.GET.get("delegation", "")
    delegation = _get_delegation_for_user(request, int(delegation_id)) if delegation_id.isdigit() else None
    return render(request, "delegations/_lint_panel.html", _panel_context(form, _lint(form, delegation)))


def _composer_post(request: HttpRequest, delegation: Delegation | None) -> HttpResponse:
    action = request.POST.get("action", "check")
    if action == "import":
        return _import(request, delegation)
    form = ComposerForm(request.POST, skill=_skill_named(request.POST.get("skill", "")))
    adapter_form = AdapterForm(request.POST)
    report = _lint(form, delegation)
    valid = form.is_valid()
    if valid and action == "save":
        return _save_and_maybe_run(request, form, adapter_form, delegation, report, run=False)
    if valid and action == "run":
        if report.runnable and adapter_form.is_valid():
            return _save_and_maybe_run(request, form, adapter_form, delegation, report, run=True)
        if not report.runnable:
            messages.error(request, f"Not started. {report.blocked_because}")
    if valid and action == "check":
        # a fresh form from the packet: what was typed, with an empty criterion row again
        initial = {**initial_from_packet(packet_from_form(form.cleaned_data)),
                   **{key: form.cleaned_data[key] for key in ("name", "template", "base_version")}}
        form = ComposerForm(skill=form.skill, initial=initial)
    return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                   status=200 if action == "check" else 422)


def _save_and_maybe_run(request: HttpRequest, form: ComposerForm, adapter_form: AdapterForm,
                        delegation: Delegation | None, report: LintReport, *, run: bool) -> HttpResponse:
    cleaned = form.cleaned_data
    packet = packet_from_form(cleaned)
    name = form.delegation_name() if run else cleaned["name"]
    try:
        if delegation is None:
            delegation = delegation_create(owner=request.user, name=name, packet=packet,
                                           template=cleaned["template"])
        else:
            delegation = delegation_update(delegation=delegation, user=request.user, name=name, packet=packet,
                                           template=cleaned["template"], base_version=cleaned["base_version"] or 0)
    except StaleSave as stale:
        # keep what was typed, now based on the current version, so saving again overwrites
        data = request.POST.copy()
        data["base_version"] = str(stale.current_version)
        form = ComposerForm(data, skill=form.skill)
        form.is_valid()
        return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                       stale=stale, status=409)
    except DelegationError as error:
        field = error.details.get("field")
        form.add_error(field if field in form.fields else None, error.message)
        return _render(request, form, adapter_form=adapter_form, delegation=delegation, report=report,
                       status=error.status)
    if not run:
        messages.success(request, f"Saved {delegation.name} (version {delegation.version}).")
        return redirect(_edit_url(delegation))
    try:
        started = delegation_start_run(delegation=delegation, user=request.user,
                                       adapter=adapter_form.cleaned_data["adapter"],
                                       config=adapter_form.cleaned_data["adapter_config"])
    except (ProtocolError, DelegationError) as error:
        messages.error(request, f"Saved as version {delegation.version}, but not started: {error.message}")
        return redirect(_edit_url(delegation))
    messages.success(request, f"Saved {delegation.name} (version {delegation.version}) and started it. "
                              "This page follows the run live.")
    return redirect("delegations:run_detail", run_id=started.pk)


def _import(request: HttpRequest, delegation: Delegation | None) -> HttpResponse:
    """Fill the form from a packet pasted or uploaded in any dialect."""
    import_form = ImportForm(request.POST, request.FILES)
    problems: list[dict[str, str]] = []
    if import_form.is_valid():
        try:
            packet = parse_packet(import_form.cleaned_data["packet_json"]).to_dict()
        except ProtocolError as error:
            problems = [issue.as_dict() for issue in error.issues] or [{"field": "", "message": error.message}]
        else:
            initial = {**initial_from_packet(packet), "name": request.POST.get("name", ""),
                       "template": bool(request.POST.get("template")),
                       "base_version": request.POST.get("base_version") or None}
            form = ComposerForm(skill=_skill_named(str(packet.get("skill") or "")), initial=initial)
            messages.info(request, "The form is filled from the packet. Nothing is saved until you save.")
            return _render(request, form, delegation=delegation, packet=packet)
    if delegation is not None:
        form, packet = _saved_form(delegation)
    else:
        packet = packet_from_form(new_initial())
        form = ComposerForm(initial=new_initial())
    return _render(request, form, delegation=delegation, packet=packet,
                   import_form=import_form, import_problems=problems, status=422)


# -- linting and drawing -------------------------------------------------------------------

def _parent_packet(delegation: Delegation | None) -> dict[str, Any] | None:
    """The packet of the delegation above this one in its tree, which lint compares it with."""
    parent = delegation.parent if delegation is not None else None
    return parent.packet_dict() if parent is not None else None


def _lint(form: ComposerForm, delegation: Delegation | None) -> LintReport:
    """The report for a bound form: the form's own errors come first, as problems, and what
    did clean is linted as the packet it stands for."""
    valid = form.is_valid()
    report = lint_report(packet_from_form(form.cleaned_data), parent=_parent_packet(delegation))
    if valid:
        return report
    problems = [{"field": name if name != "__all__" else "success_criteria", "message": str(message)}
                for name, errors in form.errors.items() for message in errors]
    return replace(report, problems=problems + report.problems)


def _unbound_report(form: ComposerForm, packet: dict[str, Any], delegation: Delegation | None) -> LintReport:
    report = lint_report(packet, parent=_parent_packet(delegation))
    missing = [{"field": spec.name, "message": f"Write the {spec.name.replace('_', ' ')}; it is required."}
               for spec in PACKET_FIELDS if form.fields[spec.name].required and not form[spec.name].value()]
    return replace(report, problems=missing + report.problems) if missing else report


def _panel_context(form: ComposerForm, report: LintReport) -> dict[str, Any]:
    groups: dict[str, list[dict[str, str]]] = {str(severity): [] for severity in Severity}
    for problem in report.problems:
        groups[Severity.ERROR].append({**problem, "code": "", "anchor": form.anchor(problem["field"])})
    for finding in report.findings:
        groups[finding["severity"]].append({**finding, "anchor": form.anchor(finding["field"])})
    packet_json = json.dumps(report.packet, indent=2, ensure_ascii=False) if report.packet else ""
    errors, warnings, infos = groups[Severity.ERROR], groups[Severity.WARNING], groups[Severity.INFO]
    return {"report": report, "errors": errors, "warnings": warnings, "infos": infos,
            "finding_groups": [("Errors", "error", errors), ("Warnings", "warning", warnings),
                               ("Suggestions", "info", infos)],
            "packet_json": packet_json, "form_id": "composer"}


def _render(request: HttpRequest, form: ComposerForm, *, packet: dict[str, Any] | None = None,
            report: LintReport | None = None, adapter_form: AdapterForm | None = None,
            delegation: Delegation | None = None, stale: StaleSave | None = None,
            import_form: ImportForm | None = None, import_problems: list[dict[str, str]] | None = None,
            status: int = 200) -> HttpResponse:
    if report is None:
        report = _unbound_report(form, packet or {}, delegation)
    context = {
        "form": form, "skill": form.skill, "adapter_form": adapter_form or AdapterForm(), "delegation": delegation,
        "stale": stale, "import_form": import_form or ImportForm(), "import_problems": import_problems or [],
        "action_url": _edit_url(delegation) if delegation else reverse("delegations:delegation_new"),
        "lint_url": reverse("delegations:delegation_lint") + (f"?delegation={delegation.pk}" if delegation else ""),
        "kind_params": KIND_PARAMS,
        **_panel_context(form, report),
    }
    return render(request, "delegations/composer.html", context, status=status)
