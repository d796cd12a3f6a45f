"""Model endpoints: the hosts a hosted adapter may call and the keys it may send them.

An endpoint belongs to the operator: its base URL and the *name* of the environment
variable holding its key are set where the server is configured (Django: the
``HANDOFF_MODEL_ENDPOINTS`` setting and the ``OPENAI_*``/``ANTHROPIC_*`` variables), never
in a run. A run's adapter config picks one by name (``"endpoint": "vllm"``) and sets model
settings only, so nobody who can start a run decides which host receives a credential or
which variable is read.

``HANDOFF_MODEL_ENDPOINTS`` is a JSON object of endpoints by name::

    {"vllm": {"adapter": "openai", "base_url": "http://10.0.0.5:8000/v1",
              "api_key_env": "VLLM_API_KEY", "models": ["qwen2.5-7b-instruct"]}}

``models`` lists what a run may pick (empty or left out: any model), ``default_model`` is
what a run naming none gets (else the first of ``models``), ``api_key_env`` left out sends
no key (a local server). Two endpoints are always there unless redefined: ``openai``
(``OPENAI_BASE_URL``, else api.openai.com; key ``OPENAI_API_KEY``) and ``anthropic``
(``ANTHROPIC_BASE_URL``, else the API's; key ``ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The adapters that call a host over the network, and so take an endpoint.
ENDPOINT_ADAPTERS = ("openai", "anthropic")
_ENDPOINT_KEYS = ("adapter", "base_url", "api_key_env", "models", "default_model")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    name: str
    adapter: str
    base_url: str | None = None        # None: the provider's own API
    api_key_env: str | None = None     # the environment variable holding the key; None: none
    models: tuple[str, ...] = ()       # the models a run may pick; empty: any
    default_model: str | None = None   # for a run that names none; else the first of models

    @property
    def model(self) -> str | None:
        """The model a run that names none gets."""
        return self.default_model or (self.models[0] if self.models else None)

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models


def builtin_endpoints(environ: Mapping[str, str], *, openai_model: str | None = None,
                      anthropic_model: str | None = None) -> dict[str, ModelEndpoint]:
    """The ``openai`` and ``anthropic`` endpoints, from the providers' usual variables."""
    return {
        "openai": ModelEndpoint("openai", "openai", environ.get("OPENAI_BASE_URL") or None,
                                "OPENAI_API_KEY", default_model=openai_model),
        "anthropic": ModelEndpoint("anthropic", "anthropic",
                                   environ.get("ANTHROPIC_BASE_URL") or None, "ANTHROPIC_API_KEY",
                                   default_model=anthropic_model),
    }


def parse_endpoints(text: str) -> dict[str, ModelEndpoint]:
    """Endpoints from the operator's JSON (see the module's docstring); ValueError naming the
    endpoint and the key otherwise. Empty text: none."""
    if not text.strip():
        return {}
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValueError('must be a JSON object of endpoints by name: {"<name>": {"adapter": ...}}')
    return {str(name): _endpoint(str(name), entry) for name, entry in document.items()}


def _endpoint(name: str, entry: Any) -> ModelEndpoint:
    where = f"endpoint {name!r}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}", name):
        raise ValueError(f"{where}: a name is letters, digits, '.', '_' and '-' (at most 64)")
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object with 'adapter' and 'base_url'")
    unknown = sorted(set(entry) - set(_ENDPOINT_KEYS))
    if unknown:
        raise ValueError(f"{where}: '{unknown[0]}' is not a known key (known: {', '.join(_ENDPOINT_KEYS)})")
    adapter = entry.get("adapter")
    if adapter not in ENDPOINT_ADAPTERS:
        raise ValueError(f"{where}: 'adapter' must be one of {', '.join(ENDPOINT_ADAPTERS)}, not {adapter!r}")
    base_url = entry.get("base_url")
    if base_url is not None and not (isinstance(base_url, str) and base_url.startswith(("http://", "https://"))):
        raise ValueError(f"{where}: 'base_url' must be an http:// or https:// URL, not {base_url!r}")
    key_env = entry.get("api_key_env")
    if key_env is not None and not (isinstance(key_env, str) and _ENV_NAME.match(key_env)):
        raise ValueError(f"{where}: 'api_key_env' must name an environment variable "
                         f"(letters, digits, _), not {key_env!r}")
    models = entry.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        raise ValueError(f"{where}: 'models' must be a list of model names")
    default = entry.get("default_model")
    if default is not None and not (isinstance(default, str) and default and (not models or default in models)):
        raise ValueError(f"{where}: 'default_model' must be one of 'models', not {default!r}")
    return ModelEndpoint(name, adapter, base_url, key_env, tuple(models), default)


def _from_environment() -> Mapping[str, ModelEndpoint]:
    return builtin_endpoints(os.environ)


_source: Callable[[], Mapping[str, ModelEndpoint]] = _from_environment


def use_endpoints(source: Callable[[], Mapping[str, ModelEndpoint]]) -> None:
    """Make ``source`` the installation's endpoints, read at each adapter's construction
    (Django passes its setting; used alone, the protocol has the built-in two)."""
    global _source
    _source = source


def installed_endpoints() -> Mapping[str, ModelEndpoint]:
    return _source()
