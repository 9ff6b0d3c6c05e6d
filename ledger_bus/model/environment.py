"""Where a program finds its ledger when it is not told: the environment variables and the
default URL, in a module of their own so that reading them imports no store; and how a URL is
shown to people."""

from __future__ import annotations

import ipaddress
from typing import Final
from urllib.parse import urlsplit, urlunsplit

DEFAULT_URL: Final = "redis://127.0.0.1:6379/0"
URL_ENV: Final = "LEDGER_BUS_URL"
ARCHIVE_ENV: Final = "LEDGER_BUS_ARCHIVE"


def without_password(url: str) -> str:
    """The URL as an error or a page shows it: its password, if any, hidden (`user:***@`)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user, _, hosts = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:***@{hosts}"))


def is_loopback(host: str) -> bool:
    """Whether a server bound to `host` listens on this machine alone."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
