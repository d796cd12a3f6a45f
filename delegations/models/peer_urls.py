"""What the records of the peers runs reach (MCP servers, remote A2A agents) check in a URL.

Both records decide which host receives a secret, and both are shown in the admin and the
API: a secret belongs in an environment variable the record names, never in its URL.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def credentials_problem(url: str, secret_prefix: str) -> str | None:
    """Why ``url`` may not be stored (it carries credentials), else None. A text that is
    not a URL at all passes here: the field's own validator says so."""
    try:
        has_credentials = "@" in urlsplit(url).netloc
    except ValueError:
        return None
    if not has_credentials:
        return None
    return (f"Leave credentials out of the URL (it is stored and shown); put the secret in a "
            f"{secret_prefix}… variable and name it in secret_env.")
