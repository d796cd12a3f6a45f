"""Property tests (bounded): the protocol's readers of untrusted input raise nothing but
their documented errors: ProtocolError (manifests, bundles, packets, results) or pydantic's
ValidationError (``SkillManifest.model_validate``)."""

from __future__ import annotations

import contextlib
import io
import json
import zipfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from delegations.protocol.errors import ProtocolError
from delegations.protocol.manifest import SkillManifest, load_bundle, load_manifest
from delegations.protocol.packet.parsing import parse_packet
from delegations.protocol.results.dialects import parse_result_dict
from delegations.protocol.results.parsing import parse_result, parse_result_text

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25)
MANIFEST_KEYS = ["skill_name", "version", "entry_point", "input_schema", "output_schema",
                 "capabilities", "requires_approval", "tags", "subagent_type", "examples",
                 "instructions", "description"]
manifests = st.dictionaries(st.sampled_from(MANIFEST_KEYS), json_values, max_size=12)
PACKET_KEYS = ["goal", "subagent_type", "instruction_set", "input_data", "budget", "capabilities",
               "success_criteria", "timeout_s", "timeoutMs", "successCriteria", "runTimeoutSeconds",
               "task", "context", "metadata", "expectations", "children", "depth", "max_depth",
               "expected_output_schema", "previous_failure", "label", "skill", "name", "arguments"]
packets = st.dictionaries(st.sampled_from(PACKET_KEYS), json_values, max_size=10)
RESULT_KEYS = ["status", "output_payload", "summary", "error_report", "evidence", "openQuestions",
               "artifacts", "handoff", "files_modified", "result", "outcome", "name", "arguments",
               "acceptance_criteria_confirmation", "state"]
results = st.dictionaries(st.sampled_from(RESULT_KEYS), json_values, max_size=8)
STATUSES = ["COMPLETE", "PARTIAL", "FAILED", "SUCCESS", "completed", "needs_input", "success", "??"]
result_blocks = st.builds(
    lambda status, lines, junk: f"{junk}\n## RESULT\n- **Status**: {status}\n" + "\n".join(lines),
    st.sampled_from(STATUSES),
    st.lists(st.sampled_from(["- **Failed Reason**: TOOL_FAILURE", "- **Files Modified**: a.py",
                              "- **Deliverables**:", "  - x", "```json", "{\"a\": ", "```",
                              "- **Needs Followup**: yes", "- **Blockers**: none", "###", ""]),
             max_size=10),
    st.text(max_size=40))


@BOUNDED
@given(manifests)
def test_load_manifest_raises_only_protocol_errors(data: dict[str, Any]) -> None:
    with contextlib.suppress(ProtocolError):
        load_manifest(data)


@BOUNDED
@given(manifests)
def test_the_model_refuses_what_load_manifest_refuses(data: dict[str, Any]) -> None:
    try:
        load_manifest(data)
        loaded = True
    except ProtocolError:
        loaded = False
    try:
        SkillManifest.model_validate(data)
        validated = True
    except ValidationError:
        validated = False
    # the model checks fields and the approval rule; load_manifest also checks bundle files
    # and required keys the model defaults (capabilities), so it may refuse more, never less
    assert validated or not loaded


@BOUNDED
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_load_bundle_raises_only_protocol_errors_for_any_bytes(raw: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        load_bundle(raw)


@BOUNDED
@given(st.dictionaries(st.text(min_size=1, max_size=20), st.binary(max_size=50), max_size=5), manifests)
def test_load_bundle_raises_only_protocol_errors_for_any_zip(files: dict[str, bytes],
                                                             manifest: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
        for name, content in files.items():
            try:
                archive.writestr(name, content)
            except (ValueError, UnicodeEncodeError):
                continue
    with contextlib.suppress(ProtocolError):
        load_bundle(buffer.getvalue())


@BOUNDED
@given(packets)
def test_parse_packet_raises_only_protocol_errors(data: dict[str, Any]) -> None:
    with contextlib.suppress(ProtocolError):
        parse_packet(data)


@BOUNDED
@given(st.text(max_size=200) | st.binary(max_size=200))
def test_parse_packet_of_any_text_raises_only_protocol_errors(raw: str | bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_packet(raw)


@BOUNDED
@given(results)
def test_parse_result_of_any_dict_raises_only_invalid_result(data: dict[str, Any]) -> None:
    for parse in (parse_result, parse_result_dict):
        try:
            parse(data)
        except ProtocolError as exc:
            assert exc.code == "ERR_INVALID_RESULT"


@BOUNDED
@given(st.text(max_size=300) | result_blocks | results.map(json.dumps))
def test_parse_result_of_any_text_raises_only_invalid_result(text: str) -> None:
    for parse in (parse_result, parse_result_text):
        try:
            parse(text)
        except ProtocolError as exc:
            assert exc.code == "ERR_INVALID_RESULT"
