"""The composer pages: starting, the live check, the plain-POST check, importing a packet,
saving (and a stale save) and running, as a person in a browser would use them."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from html.parser import HTMLParser
from typing import Any

import pytest
from django.urls import reverse
from django.utils.html import escape

from delegations.composer.starters import CHECKLIST
from delegations.models import Delegation, Run
from skills.models import Skill
from tests.protocol import protocol_examples as examples
from tests.skills.factories import add_skill

pytestmark = pytest.mark.django_db

NEW = "/delegations/new/"
LINT = "/delegations/lint/"
ADDRESS_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 100},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["query", "address"],
}
SCRIPT_SUCCESS = {"script": [{"tool_calls": [{"name": "yield_control", "arguments": {
    "status": "SUCCESS", "output_payload": {"summary": " ".join(["word"] * 60)}}}]}]}


class _FormReader(HTMLParser):
    """What a browser would submit for the form with ``form_id`` (no button pressed)."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside, self.in_template = form_id, False, 0
        self.data: list[tuple[str, str]] = []
        self._textarea: str | None = None
        self._select: tuple[str, list[str], list[str]] | None = None   # name, selected, first
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.inside = values.get("id") == self.form_id
        if tag == "template":
            self.in_template += 1
        if not self.inside or self.in_template or "disabled" in values:
            return
        if tag == "option" and self._select is not None:
            self._select[2].append(values.get("value", ""))
            if "selected" in values:
                self._select[1].append(values.get("value", ""))
        name = values.get("name")
        if not name:
            return
        if tag == "input" and values.get("type") not in ("submit", "button", "file"):
            if values.get("type") not in ("checkbox", "radio") or "checked" in values:
                self.data.append((name, values.get("value", "on" if values.get("type") == "checkbox" else "")))
        elif tag == "textarea":
            self._textarea, self._text = name, []
        elif tag == "select":
            self._select = (name, [], [])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "template":
            self.in_template -= 1
        elif tag == "form":
            self.inside = False
        elif tag == "textarea" and self._textarea is not None:
            # the HTML spec drops one newline right after <textarea>
            self.data.append((self._textarea, "".join(self._text).removeprefix("\n")))
            self._textarea = None
        elif tag == "select" and self._select is not None:
            name, selected, options = self._select
            self.data.extend((name, value) for value in (selected or options[:1]))
            self._select = None


def form_data(response: Any, form_id: str = "composer", **changes: Any) -> dict[str, Any]:
    """The form's fields as the page rendered them, with ``changes`` applied (a list for
    a multi-valued field, None to leave a field out)."""
    reader = _FormReader(form_id)
    reader.feed(response.content.decode())
    data: dict[str, Any] = {}
    for name, value in reader.data:
        data.setdefault(name, []).append(value)
    data = {name: values if len(values) > 1 or name == "capabilities" else values[0]
            for name, values in data.items()}
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value
    return data


def checked_packet(response: Any) -> dict[str, Any]:
    """The packet a check answered with, as the JSON view receives it."""
    latest = re.search(r'<script id="packet-latest" type="application/json">(.*?)</script>',
                       response.content.decode(), re.S)
    assert latest is not None, "the check panel carries no packet"
    return json.loads(json.loads(latest.group(1)))


def page(response: Any) -> str:
    return " ".join(response.content.decode().split())


@pytest.fixture
def skill(db: Any) -> Skill:
    return add_skill("address-lookup", "1.2.0", input_schema=ADDRESS_SCHEMA,
                     output_schema={"summary": "string"}, capabilities=["search", "network_outbound"],
                     requires_approval=True)


# -- starting --------------------------------------------------------------------------------

def test_the_start_page_offers_skills_and_roles(composer_client, skill):
    response = composer_client.get(NEW)
    assert response.status_code == 200
    text = page(response)
    assert f'href="{NEW}?skill=address-lookup%401.2.0"' in text
    for role in ("coder", "researcher", "reviewer", "executor", "planner", "critic", "verifier"):
        assert f'href="{NEW}?role={role}"' in text


def test_the_start_page_says_what_to_do_without_skills(composer_client):
    assert "No skills in the registry yet." in page(composer_client.get(NEW))


def test_people_without_the_composer_role_are_refused(outsider_client):
    assert outsider_client.get(NEW).status_code == 403


@pytest.mark.parametrize("role", ["coder", "researcher", "reviewer", "executor", "planner", "critic",
                                  "verifier"])
def test_the_composer_opens_for_each_role(composer_client, role):
    response = composer_client.get(f"{NEW}?role={role}")
    assert response.status_code == 200
    text = page(response)
    assert f'<option value="{role}" selected>' in text
    assert 'id="lint-panel"' in text
    if role in ("researcher", "planner", "critic", "executor", "verifier"):
        assert f'id="section-{role}" data-roles="{role}">' in text   # shown, not hidden


def test_the_composer_from_a_skill_draws_its_input_schema(composer_client, skill):
    text = page(composer_client.get(f"{NEW}?skill=address-lookup@1.2.0"))
    assert 'name="input__query"' in text and "At most 100 characters." in text   # said, not cut by maxlength
    assert ('<fieldset class="nested" id="input__address"><legend>address '
            '<span class="muted small">(required)</span></legend>') in text
    assert '<label for="id_input__address__city" class="required">' in text
    assert 'name="input__tags"' in text and "One item per line." in text
    # only the skill's capabilities, the approval one marked
    assert 'value="search"' in text and 'value="fs_read"' not in text
    assert "waits for a person's approval each time" in text


def test_the_skill_page_starts_the_composer_and_keeps_the_raw_form(composer_client, skill):
    text = page(composer_client.get("/skills/address-lookup/"))
    assert f'href="{NEW}?skill=address-lookup@1.2.0">Start a run with this skill' in text
    assert 'href="/runs/new/?skill=address-lookup@1.2.0"' in text


def test_the_navigation_has_delegations(composer_client):
    assert '<a href="/delegations/" >Delegations</a>' in page(composer_client.get("/"))


# -- the live check --------------------------------------------------------------------------

def _lint(client: Any, **changes: Any) -> str:
    start = client.get(f"{NEW}?role=researcher")
    changes.setdefault("goal", "Find the current price of TSLA in USD")
    response = client.post(LINT, form_data(start, **changes))
    assert response.status_code == 200
    return page(response)


def test_the_form_posts_to_the_check_as_the_person_types(composer_client):
    text = page(composer_client.get(f"{NEW}?role=coder"))
    assert f'hx-post="{LINT}" hx-trigger="input changed delay:100ms, change" hx-sync="this:replace"' in text
    assert 'hx-target="#lint-panel"' in text


def test_a_vague_criterion_is_flagged_and_a_measurable_one_is_not(composer_client):
    vague = _lint(composer_client, success_criteria_text="Do a good job")
    assert "VAGUE_CRITERIA" in vague
    assert 'href="#id_success_criteria_text" data-focus="id_success_criteria_text"' in vague
    assert "VAGUE_CRITERIA" not in _lint(composer_client, success_criteria_text="Word count > 50")


def test_model_settings_that_do_not_read_are_checked_as_they_are_typed(composer_client):
    # the check said "0 errors · Saves this version, then starts it", and the run was refused
    broken = _lint(composer_client, adapter="local", adapter_config='{"model": "smollm2-135m",}')
    assert '<span class="badge bad">1 error</span>' in broken
    assert 'href="#id_adapter_config"' in broken and "This is not valid JSON" in broken
    assert re.search(r'value="run" disabled', broken) and "Fix the model&#x27;s settings" in broken
    fine = _lint(composer_client, adapter="local", adapter_config='{"model": "smollm2-135m"}')
    assert "Saves this version, then starts it." in fine and "id_adapter_config" not in fine


def test_a_confident_criterion_is_checked_as_it_is_typed(composer_client):
    from django.core.management import call_command

    call_command("load_builtin_skills", verbosity=0)
    start = composer_client.get(f"{NEW}?skill=review-sentiment")
    base = {"goal": "Classify the review.", "input__review": "Loud but quick.",
            "criterion-0-kind": "confident", "criterion-0-path": "evidence", "criterion-0-min": "0.8"}
    text = page(composer_client.post(LINT, form_data(start, **base)))
    assert "CONFIDENT_NOT_A_LABEL" in text and "`evidence` is not a label" in text
    text = page(composer_client.post(LINT, form_data(start, **{**base, "criterion-0-path": "sentiment",
                                                                  "criterion-0-min": "80"})))
    assert "expected a probability between 0 and 1; got 80" in text
    text = page(composer_client.post(LINT, form_data(start, **{
        **base, "criterion-0-kind": "quoted_from", "criterion-0-source": "reviews"})))
    assert "CRITERION_SOURCE_UNKNOWN" in text and "its inputs: review" in text
    packet = checked_packet(composer_client.post(LINT, form_data(start, **{**base, "criterion-0-path": "sentiment"})))
    assert {"kind": "confident", "path": "sentiment", "min": 0.8} in packet["success_criteria"]


def test_the_check_shows_the_review_depth_and_its_reason(composer_client):
    text = _lint(composer_client)
    assert "Review depth:" in text


def test_run_is_disabled_with_the_reason_while_errors_remain(composer_client):
    start = composer_client.get(f"{NEW}?role=executor")
    text = page(composer_client.post(LINT, form_data(start, goal="Implement the search endpoint")))
    assert "CRITERIA_MISSING" in text
    assert 'value="run" disabled aria-describedby="run-blocked"' in text
    assert 'id="run-blocked"' in text and "Fix executor_params.acceptance_criteria first" in text


def test_a_missing_goal_blocks_run_too(composer_client):
    text = _lint(composer_client, goal="")
    assert "Fix goal first: This field is required." in text


def test_a_runnable_packet_enables_run(composer_client):
    text = _lint(composer_client, success_criteria_text="Word count > 50")
    assert 'name="action" value="run">' in text


def test_invalid_json_is_shown_at_its_field_and_kept(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    response = composer_client.post(NEW, form_data(start, goal="Refactor the login handler",
                                                   input_data='{"path": "src/auth.py",', action="check"))
    text = page(response)
    assert "This is not valid JSON" in text
    assert '{&quot;path&quot;: &quot;src/auth.py&quot;,</textarea>' in text
    assert 'href="#id_input_data"' in text


def test_without_scripts_check_re_renders_the_page_with_findings(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    response = composer_client.post(NEW, form_data(start, goal="Refactor the login handler",
                                                   success_criteria_text="Do a good job", action="check"))
    assert response.status_code == 200
    text = page(response)
    assert "VAGUE_CRITERIA" in text and "Refactor the login handler</textarea>" in text
    assert 'id="composer"' in text


def test_a_structured_criterion_row_becomes_part_of_the_packet(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    data = form_data(start, goal="Summarize the design doc", **{
        "criterion-0-kind": "word_count", "criterion-0-path": "summary", "criterion-0-min": "50"})
    packet = checked_packet(composer_client.post(LINT, data))
    assert {"kind": "word_count", "field": "summary", "min": 50} in packet["success_criteria"]


# -- the JSON view and importing ------------------------------------------------------------

def test_each_check_carries_the_packet_for_the_json_view(composer_client):
    assert checked_packet(composer_client.post(LINT, form_data(composer_client.get(f"{NEW}?role=researcher"))))[
        "subagent_type"] == "researcher"


def test_the_json_view_shows_the_canonical_packet_with_copy_and_download(composer_client):
    text = page(composer_client.get(f"{NEW}?role=researcher"))
    editor = re.search(r'<textarea name="packet_json"[^>]*>(.*?)</textarea>', text, re.S)
    assert editor is not None and "&quot;subagent_type&quot;: &quot;researcher&quot;" in editor.group(1)
    assert 'download="packet.json"' in text and "data-copy=" in text


FILL = reverse("delegations:delegation_fill")


def test_editing_the_json_redraws_the_form_and_keeps_the_name(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    packet = {**examples.AGLOOP_EXECUTOR}
    response = composer_client.post(FILL, form_data(start, name="From the JSON view",
                                                    packet_json=json.dumps(packet)))
    assert response.status_code == 200
    text = page(response)
    assert "src/api/handlers/search.ts" in text and 'value="From the JSON view"' in text
    assert "<html" not in text   # only the form, for the page to put in place


def test_json_that_does_not_read_as_a_packet_keeps_the_form_and_says_why(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    response = composer_client.post(FILL, form_data(start, packet_json='{"goal": 42, "budget": "lots"}'))
    assert response.status_code == 422
    text = page(response)
    assert "Handoff could not read this as a hand-off packet." in text and "budget" in text
    assert 'id="composer"' not in text


def test_a_saved_delegation_filled_from_json_keeps_its_version_and_template(composer_client, composer):
    _save(composer_client, name="Saved", goal="Refactor the login handler")
    delegation = Delegation.objects.get(name="Saved")
    start = composer_client.get(reverse("delegations:delegation_edit", args=[delegation.pk]))
    text = page(composer_client.post(f"{FILL}?delegation={delegation.pk}",
                                     form_data(start, packet_json=json.dumps(examples.DELEGATION_CONTRACT))))
    assert examples.CONTRACT_GOAL in text
    assert f'name="base_version" value="{delegation.version}"' in text


@pytest.mark.parametrize("name, check", [
    ("HANDOFF_DELEGATE_TASK_ARGS", "You are a market data researcher."),
    ("HANDOFF_PACKAGE", "Summarize the three most cited papers"),
    ("DELEGATION_CONTRACT", examples.CONTRACT_GOAL),
    ("OPENCLAW_SPAWN_PARAMS", "Summarize the open issues labelled"),
    ("AGLOOP_EXECUTOR", "src/api/handlers/search.ts"),
])
def test_a_packet_in_any_dialect_fills_the_form(composer_client, name, check):
    response = composer_client.post(NEW, {"action": "import", "packet_json": json.dumps(getattr(examples, name))})
    assert response.status_code == 200
    text = page(response)
    assert check.replace("'", "&#x27;") in text
    assert "The form is filled from the packet." in text


def test_an_uploaded_packet_fills_the_form(composer_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("packet.json", json.dumps(examples.DELEGATION_CONTRACT).encode())
    text = page(composer_client.post(NEW, {"action": "import", "packet_file": upload}))
    assert examples.CONTRACT_GOAL in text


def test_an_uploaded_packet_saved_with_a_byte_order_mark_fills_the_form(composer_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("packet.json", "\ufeff".encode() + json.dumps(examples.DELEGATION_CONTRACT).encode())
    text = page(composer_client.post(NEW, {"action": "import", "packet_file": upload}))
    assert examples.CONTRACT_GOAL in text


def test_an_upload_that_does_not_read_keeps_what_the_form_held(composer_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    held = json.dumps({"goal": "Summarize the incident report", "subagent_type": "researcher"})
    upload = SimpleUploadedFile("notes.txt", b"these are my notes, not a packet")
    response = composer_client.post(NEW, {"action": "import", "name": "Incident summary", "packet_json": held,
                                          "packet_file": upload})
    assert response.status_code == 422
    text = page(response)
    assert "Handoff could not read this as a hand-off packet." in text
    assert "Summarize the incident report" in text and 'value="Incident summary"' in text


def test_a_packet_of_unknown_shape_says_what_was_expected(composer_client):
    response = composer_client.post(NEW, {"action": "import", "packet_json": '{"goal": 42, "budget": "lots"}'})
    assert response.status_code == 422
    text = page(response)
    assert "Handoff could not read this as a hand-off packet." in text
    assert "budget" in text
    assert '{&quot;goal&quot;: 42, &quot;budget&quot;: &quot;lots&quot;}</textarea>' in text


@pytest.mark.parametrize("text", ["goal: do it", '{"goal": ' + "[" * 5000 + "]" * 5000 + "}"],
                         ids=["not-json", "nested-too-deeply"])
def test_text_that_is_not_json_is_refused_plainly(composer_client, text):
    response = composer_client.post(NEW, {"action": "import", "packet_json": text})
    assert response.status_code == 422
    assert "Handoff could not read this as a hand-off packet." in page(response)


def test_json_view_text_nested_too_deeply_keeps_the_form_and_says_why(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    nested = '{"goal": ' + "[" * 5000 + "]" * 5000 + "}"
    response = composer_client.post(FILL, form_data(start, packet_json=nested))
    assert response.status_code == 422
    assert "nests arrays or objects too deeply to read" in page(response)


# -- saving and running ----------------------------------------------------------------------

def _save(client: Any, url: str = NEW, **changes: Any) -> Any:
    start = client.get(url if url != NEW else f"{NEW}?role=coder")
    return client.post(url, form_data(start, action="save", **changes))


def test_saving_creates_a_delegation_and_opens_it(composer_client, composer):
    response = _save(composer_client, name="Login refactor", goal="Refactor the login handler")
    delegation = Delegation.objects.get(name="Login refactor")
    assert response.status_code == 302 and response["Location"] == f"/delegations/{delegation.pk}/"
    assert delegation.owner == composer and delegation.packet["goal"] == "Refactor the login handler"
    text = page(composer_client.get(response["Location"]))
    assert "Saved “Login refactor” (version 1)." in text
    assert 'name="base_version" value="1"' in text and "Refactor the login handler</textarea>" in text


def test_saving_without_a_name_asks_for_one(composer_client):
    response = _save(composer_client, name="", goal="Refactor the login handler")
    assert response.status_code == 400
    assert "Give the delegation a name." in page(response)
    assert not Delegation.objects.exists()


def test_a_stale_save_shows_who_saved_and_the_diff_and_keeps_the_typing(composer_client, approver):
    _save(composer_client, name="Login refactor", goal="Refactor the login handler")
    delegation = Delegation.objects.get()
    url = reverse("delegations:delegation_edit", args=[delegation.pk])
    opened = composer_client.get(url)
    from delegations.composer.services import delegation_update

    delegation_update(delegation=delegation, user=delegation.owner, base_version=1,
                      packet={**delegation.packet, "goal": "Refactor the logout handler"})
    response = composer_client.post(url, form_data(opened, action="save", goal="Refactor the login form"))
    assert response.status_code == 409
    text = page(response)
    assert "Not saved." in text and "carol saved version 2" in text
    assert "Refactor the logout handler" in text           # the diff
    assert "Refactor the login form</textarea>" in text     # what was typed
    assert 'name="base_version" value="2"' in text
    again = composer_client.post(url, form_data(response, action="save"))
    assert again.status_code == 302
    delegation.refresh_from_db()
    assert delegation.version == 3 and delegation.packet["goal"] == "Refactor the login form"


def test_the_list_finds_delegations_by_name(composer_client):
    _save(composer_client, name="Login refactor", goal="Refactor the login handler")
    _save(composer_client, name="Price check", goal="Find the current price of TSLA")
    text = page(composer_client.get("/delegations/?q=login"))
    assert ">Login refactor</a>" in text and ">Price check</a>" not in text
    assert "No delegation matches." in page(composer_client.get("/delegations/?template=1"))


def test_the_list_says_how_to_start_when_empty(composer_client):
    assert "No delegations yet." in page(composer_client.get("/delegations/"))


@pytest.mark.django_db(transaction=True)   # the run is queued when the request's transaction commits
def test_run_saves_and_lands_on_the_run_page(composer_client, immediate_tasks):
    start = composer_client.get(f"{NEW}?role=researcher")
    response = composer_client.post(NEW, form_data(
        start, action="run", goal="Summarize the design doc", success_criteria_text="Word count > 50",
        adapter="scripted", adapter_config=json.dumps(SCRIPT_SUCCESS)))
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.delegation == Delegation.objects.get(name="Summarize the design doc")
    assert run.state == "COMPLETE"


def test_run_is_refused_while_errors_remain(composer_client):
    start = composer_client.get(f"{NEW}?role=executor")
    response = composer_client.post(NEW, form_data(start, action="run", goal="Implement the search endpoint",
                                                   adapter="scripted"))
    assert response.status_code == 422
    assert "Not started." in page(response)
    assert not Run.objects.exists()


def test_a_json_box_nested_too_deeply_is_refused_and_kept_as_typed(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    nested = '{"notes": ' + "[" * 5000 + "]" * 5000 + "}"
    response = composer_client.post(NEW, form_data(start, action="save", goal="Fix the login bug", other=nested))
    assert response.status_code == 422
    text = page(response)
    assert "This is not valid JSON: it nests arrays or objects too deeply to read." in text and escape(nested) in text
    assert "Not saved: 1 field below cannot be stored as it is. Fix it and save again" in text
    assert not Delegation.objects.exists()


def test_run_with_model_settings_that_do_not_read_says_so_at_the_top(composer_client):
    start = composer_client.get(f"{NEW}?role=coder")
    response = composer_client.post(NEW, form_data(start, action="run", goal="Fix the login bug",
                                                   adapter="local", adapter_config='{"model": smollm2}'))
    assert response.status_code == 422
    text = page(response)
    assert "Not started: the model&#x27;s settings are not usable" in text and "not valid JSON" in text
    assert not Run.objects.exists()


def test_the_adapter_select_preselects_the_default(composer_client, settings):
    settings.HANDOFF_DEFAULT_ADAPTER = "scripted"
    assert '<option value="scripted" selected>' in page(composer_client.get(f"{NEW}?role=coder"))


def test_a_template_is_saved_as_one_and_listed_as_one(composer_client):
    _save(composer_client, name="Refactor template", goal="Refactor the handler", template="on")
    assert Delegation.objects.get().template
    text = page(composer_client.get("/delegations/?template=1"))
    assert ">Refactor template</a> <span class=\"badge info\">template</span>" in text


def test_a_child_is_checked_against_its_parent(composer_client, composer):
    from delegations.composer.services import delegation_create

    parent = delegation_create(owner=composer, name="Coordinator", packet={
        "goal": "Coordinate the refactor", "budget": {"max_tokens": 1000}, "timeout_s": 60})
    child = delegation_create(owner=composer, name="Worker", parent=parent, packet={
        "goal": "Refactor auth.py", "depth": 1, "budget": {"max_tokens": 5000}, "timeout_s": 30})
    url = reverse("delegations:delegation_edit", args=[child.pk])
    opened = composer_client.get(url)
    assert "BUDGET_EXCEEDS_PARENT" in page(opened)
    assert f'hx-post="{LINT}?delegation={child.pk}"' in page(opened)
    live = composer_client.post(f"{LINT}?delegation={child.pk}", form_data(opened, budget__max_tokens="500"))
    assert "BUDGET_EXCEEDS_PARENT" not in page(live)


def test_the_composer_names_the_skill_it_starts_from_and_links_to_that_version(composer_client):
    from django.core.management import call_command

    call_command("load_builtin_skills", verbosity=0)
    html = composer_client.get("/delegations/new/?skill=price-research").content.decode()
    assert ('With the skill <a href="/skills/price-research/1.3.0/" class="mono">'
            'price-research@1.3.0</a>.') in html
    # its own checks are shown; what it does not need is folded, closed, and empty
    assert "Checked on every run of price-research@1.3.0" in html
    assert "<li><code>price</code> appears in <code>quote_text</code></li>" in html
    assert '<details class="panel section advanced" id="section-advanced">' in html
    # the coding checklist a role-started composer offers is not pre-filled on a price lookup
    assert not [item for item in CHECKLIST if html_escape(item) in html]


# -- a child delegation stays within its parent -------------------------------------------------

def test_a_childs_composer_offers_only_its_parents_capabilities_and_refuses_more(composer_client, composer):
    from delegations.composer.services import delegation_create
    from tests.delegations import scripts

    parent = delegation_create(owner=composer, name="Lead", packet=scripts.packet(capabilities=["web_search"]))
    child = delegation_create(owner=composer, name="Helper", parent=parent,
                              packet=scripts.packet(label="helper", depth=1, capabilities=["web_search"]))
    url = reverse("delegations:delegation_edit", args=[child.pk])
    start = composer_client.get(url)
    text = page(start)
    assert 'value="web_search"' in text and 'value="file_write"' not in text
    assert "Only what Lead has: a child never gets more than its parent." in text

    response = composer_client.post(url, form_data(start, action="save", capabilities=["web_search", "file_write"]))
    assert response.status_code == 422
    assert "file_write is beyond what Lead has (web_search)" in page(response)
    child.refresh_from_db()
    assert child.version == 1


def test_an_unnamed_delegation_is_named_by_its_goals_first_words_cut_at_a_word(composer):
    from delegations.composer.forms import ComposerForm

    form = ComposerForm(data={})
    form.cleaned_data = {"name": "", "goal": "Find the current price of the product in the input and "
                                             "report it in US dollars; change nothing anywhere."}
    assert form.delegation_name() == "Find the current price of the product in the input and report it in US dollars…"
    form.cleaned_data = {"name": "", "goal": "Summarise the log\nin three lines"}
    assert form.delegation_name() == "Summarise the log"
    form.cleaned_data = {"name": "Weekly report", "goal": "Anything"}
    assert form.delegation_name() == "Weekly report"
