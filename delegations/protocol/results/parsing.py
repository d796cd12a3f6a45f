"""parse_result: any result a subagent returns (text, bytes, a JSON object) -> ResponsePackage.

Text is a JSON object, a ``## RESULT`` block (the last marker wins), or prose holding a
JSON object with a status; objects are checked to be plain JSON first. Whatever goes
wrong, only ``ProtocolError(ERR_INVALID_RESULT)`` comes out.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import ErrorCode, ProtocolError
from ..text_limits import parse, refuse_constant
from .dialects import parse_result_dict, unwrap_result
from .models import ResponsePackage
from .reader import invalid_result, kind_of
from .result_block import JSON_FENCE, find_result_marker, parse_result_block

MAX_RESULT_CHARS = 1_000_000
_MAX_JSON_CANDIDATES = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_result(source: str | bytes | dict[str, Any] | object) -> ResponsePackage:
    """Any dialect's result -> ResponsePackage; raises only ProtocolError(ERR_INVALID_RESULT)."""
    try:
        if isinstance(source, bytes | bytearray):
            try:
                source = bytes(source).decode("utf-8")
            except UnicodeDecodeError:
                raise invalid_result("result: the bytes are not UTF-8 text") from None
        if isinstance(source, str):
            try:
                source.encode("utf-8")
            except UnicodeEncodeError:
                raise invalid_result("result: the text holds characters that are not valid Unicode "
                                     "(lone surrogates)") from None
            package = parse_result_text(source)
            if _SURROGATE_ESCAPE.search(source):
                _check_serializable(package)
        elif isinstance(source, dict):
            try:
                cleaned = _json_clean(source)
            except (TypeError, ValueError, RecursionError):
                raise invalid_result("result: the object is not plain JSON (it holds NaN/Infinity, "
                                     "non-JSON values or invalid text)") from None
            package = parse_result_dict(cleaned)  # type: ignore[arg-type]
        elif isinstance(source, ResponsePackage):
            return source
        else:
            raise invalid_result(f"result: expected text or a JSON object; got {kind_of(source)}")
        return package
    except ProtocolError as exc:
        if exc.code is ErrorCode.INVALID_RESULT:
            raise
        raise invalid_result(f"result: {exc.message}", exc.issues) from None
    except RecursionError:
        raise invalid_result("result: the JSON nests too deeply") from None
    except Exception as exc:  # the contract: nothing but ProtocolError escapes
        raise invalid_result(f"result: could not be read ({type(exc).__name__}: {str(exc)[:200]})") from None


def _check_serializable(package: ResponsePackage) -> None:
    """Refuse lone surrogates decoded from JSON escapes (``"\\ud800"``): they cannot round-trip."""
    try:
        json.dumps(package.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_result("result: the JSON holds an invalid \\u escape (a lone surrogate)") from None


def parse_result_text(text: str) -> ResponsePackage:
    if len(text) > MAX_RESULT_CHARS:
        raise invalid_result(f"result: {len(text)} characters is more than the {MAX_RESULT_CHARS} allowed; "
                             "return file references instead of inlining large output")
    stripped = text.strip()
    if not stripped:
        raise invalid_result("result: empty text; expected a yield_control JSON object, a '## RESULT' "
                             "block or a JSON envelope")
    if stripped[0] == "{":
        try:
            data = parse(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return parse_result_dict(data)
    marker = find_result_marker(text)
    if marker is not None:
        return parse_result_block(text, marker)
    candidates = [data for data in _json_candidates(text) if _has_status(data)]
    if candidates:
        return parse_result_dict(candidates[-1])
    raise invalid_result("result: no result found in the text; expected a yield_control JSON object "
                         "(with a status), a '## RESULT' block with '- **Status**: COMPLETE | "
                         "PARTIAL | FAILED', or a JSON result envelope")


def _json_candidates(text: str) -> list[dict[str, Any]]:
    """JSON objects inside prose: fenced blocks first, then objects starting at a '{'."""
    found: list[dict[str, Any]] = []
    if "```" in text:
        for match in JSON_FENCE.finditer(text):
            try:
                value = parse(match["body"])
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
        if found:
            return found
    decoder = json.JSONDecoder(parse_constant=refuse_constant)
    position, attempts = text.find("{"), 0
    while position != -1 and attempts < _MAX_JSON_CANDIDATES:
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        position = text.find("{", end)
    return found


def _has_status(data: dict[str, Any]) -> bool:
    try:
        return "status" in unwrap_result(data)
    except ProtocolError:
        return False



class _NotPlain(Exception):
    """The value needs json's conversions (or is refused by them): see _plain_copy."""


_MAX_PLAIN_DEPTH = 64
_MAX_PLAIN_INT_BITS = 14_000   # below the 4300-digit limit of int -> str conversion


def _plain_copy(value: object, depth: int = 0) -> object:
    """A copy of plain JSON data built from exact dict/list/str/int/float/bool/None only.

    Gives what ``json.loads(json.dumps(value))`` gives for such data (finite floats and
    ints round-trip exactly, keys keep their order) without the text in between; raises
    _NotPlain for anything else (tuples, non-string keys, subclasses, NaN, lone
    surrogates, huge ints, deep nesting) so the caller falls back to json and its exact
    behaviour.
    """
    if isinstance(value, str) and type(value) is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotPlain from None
        return value
    kind = type(value)
    if kind is bool or value is None:
        return value
    if kind is int:
        if value.bit_length() > _MAX_PLAIN_INT_BITS:  # type: ignore[attr-defined]
            raise _NotPlain
        return value
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise _NotPlain
        return value
    if depth > _MAX_PLAIN_DEPTH:
        raise _NotPlain
    if isinstance(value, dict) and kind is dict:
        copy: dict[str, object] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            if not key.isascii():
                _plain_copy(key)
            copy[key] = _plain_copy(item, depth + 1)
        return copy
    if isinstance(value, list) and kind is list:
        return [_plain_copy(item, depth + 1) for item in value]
    raise _NotPlain


def _json_clean(data: object) -> object:
    """A JSON-only copy: no NaN/Infinity, no lone surrogates, no non-JSON objects."""
    try:
        return _plain_copy(data)
    except _NotPlain:
        pass
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    return json.loads(text)
