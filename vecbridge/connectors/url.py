"""URL parsing shared by connectors: split scheme/host/path/query and never let a secret reach a message."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit, urlunsplit

_SECRET_KEYS = re.compile(r"(password|passwd|pwd|api[_-]?key|token|secret)", re.I)


def redact(url: str) -> str:
    """The URL with any password and secret-looking query values replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "&".join(
        f"{k}=***" if _SECRET_KEYS.search(k) else f"{k}={v}"
        for k, vs in parse_qs(parts.query, keep_blank_values=True).items() for v in vs
    )
    out = urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    if not netloc and url.lower().startswith(f"{parts.scheme}://") and not out.startswith(f"{parts.scheme}://"):
        out = f"{parts.scheme}://" + out[len(parts.scheme) + 1:]   # keep "scheme:///path" as the user wrote it
    return out


def query_params(url: str) -> dict[str, str]:
    """Single-valued query parameters (the last one wins)."""
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def scheme_of(url: str) -> str:
    """``qdrant`` for ``qdrant://...``; a bare path is a ``file`` URL."""
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", url)
    return m.group(1).lower() if m else "file"
