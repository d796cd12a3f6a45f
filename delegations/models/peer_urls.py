"""What the records of the peers Handoff reaches (MCP servers, remote A2A agents, an A2A
caller's push notification receiver) check in a URL.

Each decides which host receives a secret, and each is shown to someone: a secret belongs
beside the URL (an environment variable the record names, a push config's authentication),
never in it.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def carries_credentials(url: str) -> bool:
    """Whether ``url`` holds a user name or password (``https://user:pass@host``). A text
    that is not a URL at all does not: whoever reads it as one says so."""
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


def credentials_problem(url: str, secret_prefix: str) -> str | None:
    """Why ``url`` may not be stored (it carries credentials), else None."""
    if not carries_credentials(url):
        return None
    return (f"Leave credentials out of the URL (it is stored and shown); put the secret in a "
            f"{secret_prefix}… variable and name it in secret_env.")
