"""`manage.py run_delegation` and `manage.py subagents`."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from delegations.models import Run, RunMessage
from delegations.runs.workflows import run_create
from tests.delegations import scripts

pytestmark = [pytest.mark.django_db(transaction=True)]


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run_command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("run_delegation", *args, stdout=out, stderr=StringIO())
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_successful_run_exits_0_and_prints_json_events_ending_with_the_result(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet())
    config = json.dumps(scripts.with_child())
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", config, "--json")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert all(set(line) == {"run_id", "seq", "type", "ts", "data"} for line in lines)
    assert lines[-1]["type"] == "result" and lines[-1]["data"]["state"] == "COMPLETE"
    assert lines[-1]["data"]["result"]["output_payload"] == {"answer": 42}
    run = Run.objects.get(pk=lines[-1]["run_id"])
    assert run.state == "COMPLETE" and run.children.count() == 1  # recorded in the database
    assert {line["run_id"] for line in lines} == {run.pk, run.children.get().pk}


def test_any_dialect_is_accepted_and_adapter_config_may_come_from_a_file(tmp_path: Path) -> None:
    spawn = {"task": "Compare three caching options", "label": "cache-study", "runTimeoutSeconds": 60,
             "cleanup": "keep"}
    packet = write(tmp_path, "spawn.json", spawn)
    config = write(tmp_path, "config.json", scripts.leaf())
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", f"@{config}")
    assert code == 0
    assert "[cache-study #1] state: - -> PENDING" in out and "COMPLETE" in out


def test_a_run_that_ends_other_than_complete_exits_1(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet())
    failing = json.dumps({"script": [scripts.yield_turn(status="FAILURE", payload={})]})
    code, _ = run_command(packet, "--adapter", "scripted", "--adapter-config", failing, "--json")
    assert code == 1


def test_a_packet_with_lint_errors_is_a_rejected_run_and_exits_1(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet(depth=9, max_depth=3))
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config",
                            json.dumps(scripts.leaf()), "--json")
    assert code == 1
    assert json.loads(out.splitlines()[-1])["data"]["state"] == "REJECTED"


def summary_lines(out: str) -> list[str]:
    """What the command prints after the run's events."""
    lines = out.splitlines()
    return lines[max(i for i, line in enumerate(lines) if line.startswith("[")) + 1:]


def test_a_rejected_run_leads_its_summary_with_why(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet(depth=9, max_depth=3))
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", json.dumps(scripts.leaf()))
    assert code == 1
    blank, headline, state, *_ = summary_lines(out)
    assert blank == "" and state.endswith(": REJECTED")
    assert headline.startswith("Rejected: depth: depth is 9 but its own max_depth is 3.")
    assert headline.endswith("Fix the packet and start again.")


def test_a_run_out_of_model_calls_leads_its_summary_with_the_limit_to_raise(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet(max_iterations=2))
    busy = {"tool_calls": [{"name": "list_files", "arguments": {}}]}
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", json.dumps({"script": [busy] * 3}))
    assert code == 1
    assert summary_lines(out)[1] == ("Failed: the run used all 2 of its model calls before handing back a "
                                     "result; raise max_iterations or budget.max_model_calls.")


def test_a_successful_run_has_no_headline_before_its_state(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.packet())
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", json.dumps(scripts.leaf()))
    assert code == 0
    assert summary_lines(out)[1].endswith(": COMPLETE")


def test_approvals_are_decided_automatically_when_asked(tmp_path: Path) -> None:
    packet = write(tmp_path, "packet.json", scripts.approval_packet())
    config = json.dumps(scripts.needs_approval())
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config", config,
                            "--json", "--auto-approve")
    assert code == 0
    decisions = [json.loads(line)["data"].get("decision") for line in out.splitlines()
                 if json.loads(line)["type"] == "approval"]
    assert "approve" in decisions


@pytest.mark.parametrize(("make_args", "reason"), [
    (lambda tmp: [str(tmp / "missing.json")], "Cannot read"),
    (lambda tmp: [write(tmp, "bad.json", "{not json")], "not valid JSON"),
    (lambda tmp: [write(tmp, "bad.json", {"max_iterations": "many"})], "max_iterations"),
    (lambda tmp: [write(tmp, "p.json", scripts.packet()), "--adapter", "gpt-banana"], "gpt-banana"),
    (lambda tmp: [write(tmp, "p.json", scripts.packet()), "--adapter", "scripted",
                  "--adapter-config", "{nope"], "adapter config"),
    (lambda tmp: [write(tmp, "p.json", scripts.packet()), "--adapter", "scripted",
                  "--adapter-config", "[1]"], "JSON object"),
])
def test_unusable_input_exits_2_with_the_reason(tmp_path: Path, make_args: Any, reason: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("run_delegation", *make_args(tmp_path), stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert reason in str(raised.value)


def test_a_packet_naming_a_skill_runs_its_pinned_version_with_its_instructions(tmp_path: Path) -> None:
    scripts.add_caching_skill("1.0.0")
    packet = write(tmp_path, "packet.json", scripts.skill_packet("caching"))
    code, out = run_command(packet, "--adapter", "scripted", "--adapter-config",
                            json.dumps(scripts.leaf(scripts.SKILL_OUTPUT)), "--json")
    assert code == 0
    run = Run.objects.get(pk=json.loads(out.splitlines()[-1])["run_id"])
    assert run.skill == "caching@1.0.0" and run.packet["skill"] == "caching@1.0.0"
    assert scripts.SKILL_INSTRUCTIONS in scripts.first_system_message(run.pk)


@pytest.mark.parametrize(("packet", "reason"), [
    (scripts.skill_packet("caching@2.0.0"), "Skill caching has no version '2.0.0'"),
    (scripts.skill_packet("caching@1.0.0", input_data={"options": "a"}),
     "input_data.options: 'a' is not of type 'array' (skill caching@1.0.0's input_schema)"),
])
def test_a_skill_the_registry_cannot_run_exits_2_and_records_nothing(
        tmp_path: Path, packet: dict[str, Any], reason: str) -> None:
    scripts.add_caching_skill("1.0.0")
    with pytest.raises(CommandError) as raised:
        call_command("run_delegation", write(tmp_path, "p.json", packet), "--adapter", "scripted",
                     stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2 and reason in str(raised.value)
    assert not Run.objects.exists()


def subagents(*args: str) -> str:
    out = StringIO()
    call_command("subagents", *args, stdout=out)
    return out.getvalue()


def test_subagents_list_info_log_send_and_stop(composer: Any, queued_tasks: None) -> None:
    run = run_create(packet=scripts.packet(label="scout"), adapter="scripted",
                     config=scripts.leaf(), owner=composer, start=False)
    assert run.pk in subagents("list")
    info = json.loads(subagents("info", run.pk[:8], "--json"))
    assert info["session_key"] == run.session_key and info["state"] == "PENDING"
    assert "scout" in subagents("info", run.session_key)
    assert "Message" in subagents("send", run.pk, "Prefer option b.")
    assert RunMessage.objects.get(run=run).text == "Prefer option b."
    assert "CANCELLED" in subagents("stop", run.pk)
    assert run.pk not in subagents("list")
    assert run.pk in subagents("list", "--all")
    log = [json.loads(line) for line in subagents("log", run.pk, "--json").splitlines()]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert [e["data"]["state"] for e in log if e["type"] == "state"] == ["CANCELLED"]
    states = subagents("log", run.pk, "--type", "state")
    assert "CANCELLED" in states and "announce" not in states


def test_subagents_refuses_unknown_runs_and_finished_ones(composer: Any, queued_tasks: None) -> None:
    with pytest.raises(CommandError, match="No run"):
        subagents("info", "nope")
    run = run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                     owner=composer, start=False)
    subagents("stop", run.pk)
    with pytest.raises(CommandError, match="already ended"):
        subagents("send", run.pk, "hello?")
    with pytest.raises(CommandError, match="already ended"):
        subagents("stop", run.pk)


def test_subagents_stop_all_stops_every_active_root(composer: Any, queued_tasks: None) -> None:
    for _ in range(2):
        run_create(packet=scripts.packet(), adapter="scripted", config=scripts.leaf(),
                   owner=composer, start=False)
    assert "Stopped 2 run(s)." in subagents("stop", "all")
    assert not Run.objects.active().exists()
