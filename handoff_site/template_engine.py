"""Django's template engine, whose pages are always encodable.

Text stored before the text limits (delegations/protocol/text_limits.py), or written by
a model, may hold a lone surrogate; a page showing it failed to encode as UTF-8 and
answered 500. Every rendered page has them replaced (U+FFFD) instead, which keeps the
escaping Django already did, and ``urlencode``, which encodes while the page renders,
replaces them first: this is the one place, for pages, fragments and the admin.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.template.backends.django import DjangoTemplates, Template
from django.template.defaultfilters import urlencode as django_urlencode

from delegations.protocol.text_limits import printable

register = template.Library()


@register.filter(is_safe=False)
def urlencode(value: Any, safe: Any = None) -> str:
    return django_urlencode(printable(value) if isinstance(value, str) else value, safe)


class PrintableTemplate(Template):
    def render(self, context: Any = None, request: Any = None) -> str:
        return printable(super().render(context, request))


class PrintableDjangoTemplates(DjangoTemplates):
    def __init__(self, params: dict[str, Any]) -> None:
        options = params.get("OPTIONS", {})
        # a builtin library loaded after Django's own: its urlencode is the one templates use
        super().__init__({**params, "OPTIONS": {**options, "builtins": [*options.get("builtins", []), __name__]}})

    def from_string(self, template_code: str) -> PrintableTemplate:
        return PrintableTemplate(self.engine.from_string(template_code), self)

    def get_template(self, template_name: str) -> PrintableTemplate:
        return PrintableTemplate(super().get_template(template_name).template, self)
