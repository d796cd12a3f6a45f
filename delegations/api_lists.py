"""What every list of the REST API shares: its default page size, the slice of a page,
and timestamps written as ISO 8601 (the runs, delegations and inbox routers each list
rows the same way)."""

from __future__ import annotations

from typing import Any

PAGE_SIZE = 50


def page_bounds(total: int, page: int, size: int) -> tuple[int, int, int]:
    """The page count and the slice of a page; a page past the last is an empty slice
    (never an OFFSET the database cannot hold)."""
    pages = max(1, -(-total // size))
    start = min(page - 1, pages) * size
    return pages, start, start + size


def iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
