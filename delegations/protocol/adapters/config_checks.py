"""Adapter config checks: each raises ProtocolError(ERR_INVALID_ADAPTER_CONFIG) naming the key.

Configs are checked when an adapter is built, before any run starts, so a typo in a
key (``temprature``) or a bad value fails at once with a message saying what to write.
A config holds model settings only: where requests go and which key they carry are the
operator's endpoints (``endpoints.py``), which a config picks by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .base import config_error
from .endpoints import ModelEndpoint, installed_endpoints

# Config keys that would carry a credential: adapters read keys from the environment only.
_SECRET_KEYS = ("api_key", "apikey", "secret", "password", "auth_token", "token")
# Config keys that would choose a host, a header or a variable to read: the operator's.
_OPERATOR_KEY = re.compile(r"url|host|header|proxy|_env$|^env|organi[sz]ation|project", re.IGNORECASE)


def reject_unknown_keys(adapter: str, config: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed_set = set(allowed)
    for key in config:
        if key in allowed_set:
            continue
        if _OPERATOR_KEY.search(key):
            raise config_error(adapter, key,
                               "is not a run's to set: the hosts a run calls and the keys "
                               "they get are the operator's endpoints, which a config picks "
                               "by name with 'endpoint'")
        if any(secret in key.lower() for secret in _SECRET_KEYS):
            raise config_error(adapter, key,
                               "must not be in the config: API keys are read from the "
                               "environment only (never stored with a run)")
        raise config_error(adapter, key,
                           f"is not a known setting (known: {', '.join(sorted(allowed_set))})")


def number(adapter: str, config: dict[str, Any], key: str, *, minimum: float,
           maximum: float | None = None, default: float | None = None,
           exclusive_minimum: bool = False) -> float | None:
    value = config.get(key, default)
    if value is None:
        return None
    bound = f"> {minimum:g}" if exclusive_minimum else f">= {minimum:g}"
    upper = f" and <= {maximum:g}" if maximum is not None else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise config_error(adapter, key, f"must be a number {bound}{upper}, not {value!r}")
    too_low = value <= minimum if exclusive_minimum else value < minimum
    if too_low or (maximum is not None and value > maximum):
        raise config_error(adapter, key, f"must be a number {bound}{upper}, not {value!r}")
    return float(value)


def integer(adapter: str, config: dict[str, Any], key: str, *, minimum: int,
            maximum: int | None = None, default: int | None = None) -> int | None:
    value = config.get(key, default)
    if value is None:
        return None
    upper = f" and <= {maximum}" if maximum is not None else ""
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        raise config_error(adapter, key, f"must be an integer >= {minimum}{upper}, not {value!r}")
    return value


def text(adapter: str, config: dict[str, Any], key: str, *, required: bool = False,
         default: str | None = None, choices: Iterable[str] | None = None) -> str | None:
    value = config.get(key, default)
    if value is None or value == "":
        if required:
            raise config_error(adapter, key, "is required (a non-empty string)")
        return None
    if not isinstance(value, str):
        raise config_error(adapter, key, f"must be a string, not {type(value).__name__}")
    if choices is not None:
        options = tuple(choices)
        if value not in options:
            raise config_error(adapter, key, f"must be one of {', '.join(options)}, not {value!r}")
    return value


def endpoint(adapter: str, config: dict[str, Any]) -> ModelEndpoint:
    """``endpoint``: the name of one of the operator's endpoints for this adapter (default:
    the one named like the adapter)."""
    name = text(adapter, config, "endpoint", default=adapter) or adapter
    endpoints = installed_endpoints()
    found = endpoints.get(name)
    if found is None or found.adapter != adapter:
        known = sorted(key for key, value in endpoints.items() if value.adapter == adapter)
        raise config_error(adapter, "endpoint",
                           f"names no {adapter} endpoint of this server: {name!r} (known: "
                           f"{', '.join(known) or 'none'}; the operator defines them)")
    return found


def endpoint_model(adapter: str, config: dict[str, Any], chosen: ModelEndpoint) -> str:
    """``model``: one the endpoint allows, by default the endpoint's own."""
    model = text(adapter, config, "model", default=chosen.model)
    if model is None:
        raise config_error(adapter, "model", "is required (a non-empty string)")
    if not chosen.allows(model):
        raise config_error(adapter, "model",
                           f"must be one endpoint {chosen.name!r} allows ({', '.join(chosen.models)}), "
                           f"not {model!r}")
    return model


def boolean(adapter: str, config: dict[str, Any], key: str, *, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise config_error(adapter, key, f"must be true or false, not {value!r}")
    return value


def timeout_s(adapter: str, config: dict[str, Any]) -> float:
    """``timeout_s``: seconds per request, > 0, default 60."""
    return number(adapter, config, "timeout_s", minimum=0, default=60.0,
                  exclusive_minimum=True) or 60.0


def tool_choice(adapter: str, config: dict[str, Any]) -> str:
    """``tool_choice``: "auto" (the default: the model picks) or "required" (it must call a tool)."""
    return text(adapter, config, "tool_choice", default="auto", choices=("auto", "required")) or "auto"
