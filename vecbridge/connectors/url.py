"""URL parsing shared by connectors: split scheme/host/path/query and never let a secret reach a message."""
from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from typing import Iterable
from urllib.parse import parse_qs, urlsplit

from ..errors import InputError
from ..secrets import redact_text, redact_url, secrets_in

#: a URL fit for a message: the one filter of :mod:`vecbridge.secrets` (the name connectors have always used)
redact = redact_url


def query_params(url: str) -> dict[str, str]:
    """Single-valued query parameters (the last one wins)."""
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query, keep_blank_values=True).items()}


def known_params(url: str, known: Iterable[str], store: str) -> dict[str, str]:
    """The URL's query parameters (as :func:`query_params`), refusing any that ``known`` does not list: a misspelled
    option (``?vectr=``) would otherwise be ignored silently and the job would run on the default."""
    params = query_params(url)
    known = tuple(known)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InputError(f"unknown option{'s' * (len(unknown) > 1)} {', '.join(repr(k) for k in unknown)} in "
                         f"{redact(url)} ({store} URLs know: {', '.join(known)})")
    return params


def check_url(url: str) -> None:
    """Refuse a URL that cannot be parsed (a port that is not a number, a broken IPv6 address) as bad input, before
    a client tries to connect to it (``:memory:``, Qdrant's in-memory form, is no port)."""
    try:
        parts = urlsplit(url)
        if parts.netloc != ":memory:":
            parts.port
    except ValueError as exc:
        raise InputError(f"invalid URL {redact(url)}: {redact_text(str(exc), secrets_in(url))} (expected "
                         f"SCHEME://HOST[:PORT]/...)") from None


def scheme_of(url: str) -> str:
    """``qdrant`` for ``qdrant://...``; a bare path is a ``file`` URL."""
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", url)
    return m.group(1).lower() if m else "file"


def resolved_path(path) -> str:
    """An absolute path with ``~``, ``.``, ``..``, repeated slashes and symbolic links resolved (the path need not
    exist): two spellings of one directory give the same string."""
    return os.path.realpath(os.path.expanduser(str(path)))


@functools.lru_cache(maxsize=64)
def canonical_host(host: str | None) -> str:
    """One name for a server host however it is written: every loopback spelling (``localhost``, ``127.0.0.1``,
    ``::1``, this machine's own name) is ``loopback``; other names are resolved to their sorted addresses when the
    resolver answers, else kept lower-cased."""
    host = (host or "localhost").strip("[]").lower()
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        if host in ("localhost", "localhost.localdomain", socket.gethostname().lower()):
            return "loopback"
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%", 1)[0])
                         for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except (OSError, UnicodeError, ValueError):
            return host
    if all(a.is_loopback or a.is_unspecified for a in addresses):
        return "loopback"
    return ",".join(sorted(str(a) for a in addresses))
