"""Run pages: the run list, starting a run, the live run view and its controls.

Workflows (create, cancel, message, retry) live in :mod:`delegations.runs.workflows`;
deciding an item from the run page is the inbox's (:mod:`delegations.inbox.views`). These views check who may do what, call them, and redirect. A run someone may not see
answers 404; a missing role answers 403 with what to ask for.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url

from delegations.accounts.roles import can_approve, can_compose, visible_runs
from delegations.models import Run
from delegations.protocol.errors import ErrorCode, ProtocolError
from delegations.protocol.lifecycle import RunState
from delegations.run_pages import snapshot as run_snapshot
from delegations.run_pages.forms import MessageForm, RetryForm, RunFilterForm, RunStartForm
from delegations.run_pages.replay import replay_events
from delegations.run_pages.timeline_filter import TimelineFilter
from delegations.runs import traces
from delegations.runs.workflows import RunError, run_cancel, run_create, run_retry, run_send_message
from skills.models import Skill

PAGE_SIZE = 25
LIST_POLL_TRIGGER = "run-results"   # the id of the list section that polls itself
START_REFUSED = ("Starting runs needs the composer role. Ask an admin to add you to the "
                 "“composers” group; meanwhile you can watch the runs you can see.")


def _get_run_for_user(request: HttpRequest, run_id: str, *, to_act: bool = False) -> Run:
    """A run the person may open; ``to_act`` (cancel, message, retry): one of their own
    (staff: any). Approvers open the runs that ask them, but only to decide."""
    runs = Run.objects.visible_to(request.user) if to_act else visible_runs(request.user)
    run = runs.select_related("owner", "parent", "root", "retry_of").filter(pk=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id} that you can see.")
    return run


def _require_composer(request: HttpRequest) -> None:
    if not can_compose(request.user):
        raise PermissionDenied(START_REFUSED)


def _filtered_runs(request: HttpRequest, filters: dict[str, str]) -> QuerySet[Run]:
    runs = Run.objects.visible_to(request.user).select_related("owner")
    if filters["state"]:
        runs = runs.filter(state=filters["state"])
    if filters["skill"]:
        runs = runs.filter(skill__icontains=filters["skill"])   # a part of the name, as the catalog's search
    if filters["scope"] == "root":
        runs = runs.filter(parent__isnull=True)
    if filters["owner"] == "mine" or not request.user.is_staff:
        runs = runs.filter(Q(owner=request.user) | Q(root__owner=request.user))
    return runs.order_by("-created_at", "pk")


def _count_trees(runs: list[Run]) -> None:
    """Each run's ``tree_size``: the runs of its tree, itself included (a root run is its
    own root). Counted for the page's runs only: counted in the list's query, every run the
    person ever made was grouped and sorted whole, 157 ms of the page with 20,000."""
    sizes = dict(Run.objects.filter(root__in=runs).values("root").annotate(size=Count("pk"))
                 .values_list("root", "size"))
    for run in runs:
        run.tree_size = sizes.get(run.pk, 1)  # type: ignore[attr-defined]


def _detail_url(run: Run) -> str:
    return reverse("delegations:run_detail", args=[run.pk])


# -- the list -----------------------------------------------------------------------------

@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = form.filters()
    page = Paginator(_filtered_runs(request, filters), PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    _count_trees(page.object_list)
    query = form.query_string()
    page_query = form.query_string(page=page.number if page.number > 1 else "")
    list_url = f"{reverse('delegations:runs')}{'?' + page_query if page_query else ''}"
    context: dict[str, Any] = {
        "form": form, "filters": filters, "page": page, "query": query,
        "page_links": list(page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)),
        "filtered": bool(filters["state"] or filters["skill"]),
        "polling": any(not run.is_terminal for run in page.object_list),
        "can_start": can_compose(request.user), "is_staff": request.user.is_staff,
        "poll_url": list_url,
    }
    if request.htmx and not request.htmx.boosted:  # type: ignore[attr-defined]
        response = render(request, "delegations/runs/list.html#results", context)
        if request.htmx.trigger != LIST_POLL_TRIGGER:  # type: ignore[attr-defined]
            push_url(response, list_url)
        return response
    return render(request, "delegations/runs/list.html", context)


# -- starting a run -----------------------------------------------------------------------

def _example_value(schema: Any) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return {"string": "", "number": 0, "integer": 0, "boolean": False, "array": [],
            "object": {}}.get(str(kind))


def _skill_prefill(ref: str) -> dict[str, Any] | None:
    """A packet to start from for a registered skill."""
    skill = Skill.objects.resolve(ref)
    if skill is None:
        return None
    properties = (skill.input_schema or {}).get("properties") or {}
    packet: dict[str, Any] = {"skill": skill.ref}
    if skill.subagent_type:
        packet["subagent_type"] = skill.subagent_type
    # the skill's own words as the goal, and its first worked example as the input: a run
    # that works as it stands, for the person to change
    summary = (skill.description or "").split(". ")[0].rstrip(".")
    packet["goal"] = summary or f"Do what {skill.name} is for"
    examples = (skill.manifest or {}).get("examples") or []
    if not skill.instructions:
        # a skill with instructions gives the run its own; a packet's instruction_set would replace them
        packet["instruction_set"] = "Do what the skill describes; answer with yield_control."
    packet.update({
        "input_data": (dict(examples[0]["input"]) if examples else
                       {name: _example_value(schema) for name, schema in properties.items()}),
        "allowed_inputs": sorted(properties),
        "expected_output_schema": skill.output_schema or {},
        "success_criteria": ["JSON is schema-valid"],
        "capabilities": list(skill.capabilities or []),
        "timeout_s": 300,
        "budget": {"max_model_calls": 20, "max_tokens": 50000},
    })
    return packet


def _initial_start_form(request: HttpRequest) -> tuple[RunStartForm, str]:
    """An empty form, prefilled from ?skill=name@version or ?from=<run id> when given."""
    initial: dict[str, Any] = {}
    source = ""
    ref = request.GET.get("skill", "").strip()
    if ref:
        packet = _skill_prefill(ref)
        if packet is None:
            messages.warning(request, f"No skill {ref} in the registry; start from a blank packet.")
        else:
            initial["packet"] = json.dumps(packet, indent=2)
            source = f"skill {packet['skill']}"
    copied_id = request.GET.get("from", "").strip()
    if copied_id:
        copied = _get_run_for_user(request, copied_id)
        initial.update(packet=json.dumps(copied.packet, indent=2), adapter=copied.adapter_name,
                       adapter_config=json.dumps(copied.adapter_config, indent=2)
                       if copied.adapter_config else "")
        source = f"run {copied.label or copied.pk}"
    return RunStartForm(initial=initial), source


def run_new(request: HttpRequest) -> HttpResponse:
    _require_composer(request)
    issues: list[dict[str, str]] = []
    if request.method != "POST":
        form, source = _initial_start_form(request)
        return render(request, "delegations/runs/new.html", {"form": form, "source": source})
    form = RunStartForm(request.POST)
    refusal: RunError | None = None
    if form.is_valid():
        try:
            run = run_create(packet=form.cleaned_data["packet"], adapter=form.cleaned_data["adapter"],
                             config=form.cleaned_data["adapter_config"], owner=request.user)
        except ProtocolError as error:
            issues = _start_errors(form, error)
        except RunError as error:  # too many runs wait to start
            form.add_error(None, error.message)
            refusal = error
        else:
            if run.state == RunState.REJECTED:
                messages.warning(request, "The packet has lint errors, so the run was rejected; "
                                          "its findings are below. Fix them and start it again.")
            else:
                messages.success(request, "Run started. This page follows it live.")
            return redirect(_detail_url(run))
    response = render(request, "delegations/runs/new.html", {"form": form, "issues": issues},
                      status=refusal.status if refusal else 422)
    return refusal.with_headers(response) if refusal else response


def _start_errors(form: RunStartForm, error: ProtocolError) -> list[dict[str, str]]:
    """Put a run_create failure on the form: every packet issue, or the adapter problem."""
    if error.code == ErrorCode.INVALID_ADAPTER_CONFIG:
        field = "adapter" if error.details.get("key") == "name" else "adapter_config"
        form.add_error(field, error.message)
        return []
    issues = [issue.as_dict() for issue in error.issues]
    form.add_error("packet", f"{error.message}" if not issues else
                   f"The packet has {len(issues)} problem{'s' if len(issues) != 1 else ''}; "
                   f"each is listed below.")
    return issues


# -- one run ------------------------------------------------------------------------------

def _detail_context(request: HttpRequest, run: Run, **snapshot_options: Any) -> dict[str, Any]:
    context = run_snapshot.snapshot(run, **snapshot_options)
    context.update({
        "can_compose": can_compose(request.user), "can_approve": can_approve(request.user),
        "can_act": Run.objects.visible_to(request.user).filter(pk=run.pk).exists(),
        "message_form": MessageForm(), "retry_form": RetryForm(),
        "stopping": not run.is_terminal and run.is_stopping(),
        "live_url": reverse("delegations:run_live", args=[run.pk]),
        "websocket_path": f"/ws/runs/{run.pk}/", "inbox_url": reverse("delegations:inbox"),
    })
    trace_id = traces.trace_id_of(run)
    context.update({"trace_id": trace_id, "trace_url": traces.trace_url(trace_id),
                    "traces_enabled": traces.enabled()})
    return context


@require_GET
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run page; ``?node=<run id>&subtree=1&types=state,tools&errors=1`` filters its
    timeline (the live script filters the same way without a reload)."""
    run = _get_run_for_user(request, run_id)
    shown = TimelineFilter.from_query(request.GET)
    return render(request, "delegations/runs/detail.html", _detail_context(request, run, shown=shown))


def _event_id(request: HttpRequest, name: str) -> int | None:
    """An event id from the query string (None when absent; a bad one counts as 0)."""
    if name not in request.GET:
        return None
    try:
        return max(0, int(request.GET[name]))
    except ValueError:
        return 0


@require_GET
def run_live(request: HttpRequest, run_id: str) -> HttpResponse:
    """The live view's refresh: every section re-rendered from the log, the timeline only
    past event ``since`` (unfiltered: the script filters it), of the tree only the nodes
    those events changed, the streamed text only when ``streams=1``, the whole tree when
    ``tree=1``, the waterfall unless ``wf`` names the one the page has. With ``until``: only the timeline rows up to that event (a replay's
    moment), the newest TIMELINE_LIMIT of them."""
    run = _get_run_for_user(request, run_id)
    since, until = _event_id(request, "since") or 0, _event_id(request, "until")
    if until is not None:
        members = list(run.tree().order_by("depth", "created_at", "pk"))
        items, last, _left_out = run_snapshot.timeline(run, members=members, since=since, until=until)
        return render(request, "delegations/runs/detail.html#rows",
                      {"run": run, "timeline": items, "timeline_after": last})
    context = _detail_context(request, run, since=since, with_streams=request.GET.get("streams") == "1",
                              patch_tree=request.GET.get("tree") != "1")
    context["waterfall_shown"] = request.GET.get("wf", "")   # the page has it: not sent again
    return render(request, "delegations/runs/detail.html#live", context)


@require_GET
def run_replay(request: HttpRequest, run_id: str) -> JsonResponse:
    """The tree's stored events, cut down for the page's replay (:mod:`.replay`)."""
    run = _get_run_for_user(request, run_id)
    return JsonResponse(replay_events(run))


def _back_url(request: HttpRequest, run: Run) -> str:
    """Where a control posted from a tree node returns: the page it was posted from (a
    root's page, cancelling one subtree), else the run's own page."""
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()},
                                                require_https=request.is_secure()):
        return back
    return _detail_url(run)


@require_POST
def run_cancel_view(request: HttpRequest, run_id: str) -> HttpResponse:
    """Cancel the run and its subtree; its parent and siblings go on."""
    run = _get_run_for_user(request, run_id, to_act=True)
    name = f" ({run.label})" if run.label else ""
    try:
        cancelled = run_cancel(run=run, reason=f"Cancelled by {request.user.get_username()} in the browser.")
    except RunError as error:
        messages.error(request, error.message)
    else:
        parent_note = "" if run.is_root else "; its parent is told and goes on"
        if cancelled.is_terminal:
            messages.success(request, f"Run cancelled{name}, with every subagent under it{parent_note}.")
        else:
            messages.info(request, f"Cancelling{name}: the worker stops the run and its subagents "
                                   f"within a second{parent_note}.")
    return redirect(_back_url(request, run))


@require_POST
def run_trace_export_view(request: HttpRequest, run_id: str) -> HttpResponse:
    """Send the run's finished tree to the trace collector again (as ``export_traces``)."""
    run = _get_run_for_user(request, run_id, to_act=True)
    root = Run.objects.get(pk=run.root_run_id)
    if not traces.enabled():
        messages.error(request, "Tracing is off on this server (no OTEL_EXPORTER_OTLP_ENDPOINT).")
    elif not root.is_terminal:
        messages.error(request, "The run tree has not ended; its trace is sent when it ends.")
    else:
        traces.exporter().submit(root.pk)
        messages.success(request, f"The trace {traces.trace_id_of(root)} is on its way to the collector.")
    return redirect(_back_url(request, run))


@require_POST
def run_message_view(request: HttpRequest, run_id: str) -> HttpResponse:
    run = _get_run_for_user(request, run_id, to_act=True)
    form = MessageForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(error) for error in form.errors.get("text", ["The message is not valid."])))
        return redirect(_back_url(request, run))
    try:
        run_send_message(run=run, text=form.cleaned_data["text"], sender=request.user)
    except RunError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, "Message queued: the subagent reads it at its next turn.")
    return redirect(_back_url(request, run))


@require_POST
def run_retry_view(request: HttpRequest, run_id: str) -> HttpResponse:
    run = _get_run_for_user(request, run_id, to_act=True)
    _require_composer(request)
    form = RetryForm(request.POST)
    fix_instructions = form.cleaned_data["fix_instructions"] if form.is_valid() else ""
    try:
        retried = run_retry(run=run, user=request.user, fix_instructions=fix_instructions)
    except RunError as error:
        messages.error(request, error.message)
        if error.retry_after:  # too many runs wait to start: said on the run's page, with 429
            return error.with_headers(render(request, "delegations/runs/detail.html",
                                             _detail_context(request, run), status=error.status))
        return redirect(_detail_url(run))
    except ProtocolError as error:
        messages.error(request, f"The retry could not start: {error.message}")
        return redirect(_detail_url(run))
    messages.success(request, f"Attempt {retried.attempt} started, with what went wrong in attempt "
                              f"{run.attempt} as its previous_failure.")
    return redirect(_detail_url(retried))
