"""Semantic versions 2.0.0 for skills, so "latest" means highest precedence, not newest upload."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class SemVer:
    """A semantic version 2.0.0; ordered by precedence (build metadata does not count)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> SemVer:
        match = _SEMVER.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH such as "
                             "1.2.0, optionally -prerelease and +build)")
        major, minor, patch, pre, build = match.groups()
        return cls(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (),
                   build or "")

    @property
    def precedence(self) -> tuple[Any, ...]:
        # A release outranks its prereleases; numeric identifiers rank below alphanumeric.
        pre: tuple[Any, ...] = tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                                     for part in self.prerelease)
        return (self.major, self.minor, self.patch, 1 if not pre else 0, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return self.precedence == other.precedence and self.build == other.build

    def __hash__(self) -> int:
        return hash((self.precedence, self.build))

    def __lt__(self, other: SemVer) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return (self.precedence, self.build) < (other.precedence, other.build)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        return text + (f"+{self.build}" if self.build else "")


def latest_version(versions: Iterable[str], *, include_prerelease: bool = False) -> str | None:
    """The highest-precedence valid semver among ``versions`` (invalid ones are skipped).

    Like package managers' "latest", a release beats any prerelease; prereleases are only
    chosen when ``include_prerelease`` is set or when there is nothing else.
    """
    parsed: list[tuple[SemVer, str]] = []
    for text in versions:
        try:
            parsed.append((SemVer.parse(text), text))
        except ValueError:
            continue
    releases = [item for item in parsed if not item[0].prerelease]
    pool = parsed if include_prerelease or not releases else releases
    return max(pool, key=lambda item: item[0])[1] if pool else None
