"""The one secret filter: everything vecbridge writes down (messages, logs, reports, alignment artifacts' metadata,
upgrade state files, collection stamps, checkpoints, drift files, Ray task arguments) passes through it first, so that
a password given in a URL or the environment is never kept or shown anywhere.

A key is secret when its name holds one of: password, passwd, passphrase, pwd, pass, secret, token, api key
(``api_key``, ``api-key``, ``apikey``), access key, private key, auth, authorization, bearer (any case; ``PGPASSWORD``,
``MILVUS_TOKEN`` and ``db_password`` too, but not ``passed`` or ``tokens``). What a secret key holds is replaced by
``***``, and so is the password of a URL's ``user:password@``.
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable
from urllib.parse import quote, quote_plus, unquote_plus

MASK = "***"

#: the secret words, found anywhere in a key's name (``pass``, ``pwd`` and ``auth`` only as a word of their own)
_WORDS = (r"pass(?:word|wd|phrase)s?|secret(?:[_-]?key)?|token(?![a-z])|api[_-]?key|access[_-]?key|private[_-]?key"
          r"|authori[sz]ation|bearer|(?<![a-z])(?:pass|pwd|auth)(?![a-z])")
SECRET_KEY = re.compile(_WORDS, re.I)

_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
#: ``scheme://user:password@``: the password runs to the last ``@`` before the query (it may hold ``/`` unencoded)
_USERINFO = re.compile(rf"^(?P<head>{_SCHEME}(?P<user>[^/:@?#]*)):(?P<password>[^?#]*)@")
_USER = re.compile(rf"^{_SCHEME}(?P<user>[^/:@?#]*)@")
#: a URL inside free text (its end: white space, a quote or an angle bracket)
_URL_IN_TEXT = re.compile(rf"{_SCHEME}[^\s'\"<>`]+")
_TRAILING = ".,;:)]}"
#: ``key=value``, ``key:value``, ``"key": "value"`` whose key ends in a secret word (``PGPASSWORD=``, ``api_key:``;
#: not ``my_token_model:encode``), the value maybe quoted; ``key: value`` with a space only where the key is quoted,
#: since prose says "no password or token: later commands read them ..."
_PAIR = re.compile(
    r"(?<![\w.-])(?P<key>[\w.-]{1,64})(?:[\"']\s*[=:]\s*|\s*=\s*|:(?=\S))"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&'\")\]}{\[]+)")
_ENDS_SECRET = re.compile(rf"(?:{_WORDS})$", re.I)
#: an HTTP bearer credential quoted in a message
_BEARER = re.compile(r"\b(bearer\s+)[\w.~+/=-]+", re.I)


def is_secret_key(key) -> bool:
    """Whether the value of a field, query parameter or environment variable named ``key`` is a secret."""
    return isinstance(key, str) and SECRET_KEY.search(unquote_plus(key)) is not None


def _query(query: str, keep) -> str:
    """``query`` with each secret parameter's value passed through ``keep`` (None: the parameter left out); every
    other parameter kept as written."""
    out = []
    for part in query.split("&"):
        key, sep, value = part.partition("=")
        if not is_secret_key(key):
            out.append(part)
        elif keep is not None:
            out.append(f"{key}{sep}{keep(value) if sep else ''}")
    return "&".join(out)


def _split(url: str) -> tuple[str, str, str]:
    """``url`` as (up to the query, query, fragment with its ``#``)."""
    head, hash_, fragment = url.partition("#")
    head, _, query = head.partition("?")
    return head, query, hash_ + fragment


def redact_url(url: str) -> str:
    """``url`` fit to show or keep: the password of ``user:password@`` and every secret query value replaced by
    ``***``; everything else as written. A string that is no URL comes back as it is."""
    if not isinstance(url, str) or "://" not in url:
        return url
    m = _USERINFO.match(url)
    if m and m.group("password"):
        url = f"{m.group('head')}:{MASK}@{url[m.end():]}"
    head, query, fragment = _split(url)
    return head + (f"?{_query(query, lambda v: MASK if v else v)}" if "?" in url.split("#", 1)[0] else "") + fragment


def strip_url(url: str, *, keep_user: bool = True) -> str:
    """``url`` without its credentials at all, for a file a later command connects again from (a ``***`` there would
    be taken for the password): no password, no secret query parameter (and no user either unless ``keep_user``),
    so that the client reads them from the environment (``PGPASSWORD``, ``QDRANT_API_KEY``, ``MILVUS_TOKEN``)."""
    if not isinstance(url, str) or "://" not in url:
        return url
    m = _USERINFO.match(url) or _USER.match(url)
    if m:
        user = m.group("user")
        url = url[:url.index("://") + 3] + (f"{user}@" if user and keep_user else "") + url[m.end():]
    head, query, fragment = _split(url)
    query = _query(query, None)
    return head + (f"?{query}" if query else "") + fragment


def has_secrets(url: str) -> bool:
    """Whether ``url`` carries a password or a secret query value."""
    return redact_url(url) != url


def _literal(text: str, secret: str) -> str:
    """``text`` with ``secret`` replaced, as written and percent-encoded. A short secret only where it stands alone (a
    password "p" must not turn "supported" into "su***orted"); a longer one wherever it occurs."""
    for form in dict.fromkeys((secret, quote(secret, safe=""), quote_plus(secret, safe=""))):
        if len(form) >= 6:
            text = text.replace(form, MASK)
        elif form:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", MASK, text)
    return text


def _url_in_text(m: re.Match) -> str:
    url = m.group(0)
    tail = len(url) - len(url.rstrip(_TRAILING))
    return redact_url(url[:len(url) - tail]) + url[len(url) - tail:]


def _pair(m: re.Match) -> str:
    value = m.group("value")
    if value.strip("\"'") in ("", MASK) or not _ENDS_SECRET.search(m.group("key")):
        return m.group(0)
    quoted = value[0] if value[0] in "\"'" and len(value) > 1 else ""
    return f"{m.group(0)[:m.start('value') - m.start()]}{quoted}{MASK}{quoted}"


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` fit to show or keep: each of ``secrets`` (strings known to be secret: a password, a token), every URL
    in it (as :func:`redact_url`) and every ``key=value`` or ``key: value`` with a secret key, masked."""
    if not isinstance(text, str) or not text:
        return text
    for secret in sorted({s for s in secrets if isinstance(s, str) and s}, key=len, reverse=True):
        text = _literal(text, secret)
    if "://" in text:
        text = _URL_IN_TEXT.sub(_url_in_text, text)
    return _BEARER.sub(rf"\g<1>{MASK}", _PAIR.sub(_pair, text))


def secrets_in(*given: str) -> list[str]:
    """The literal secrets that strings given to vecbridge (command-line arguments) carry: each URL's password and
    secret query values, and the value of each ``KEY=VALUE`` with a secret key; as written and decoded, with the
    pieces of a password that a parser may quote alone (``a/b@host``: a password with an unencoded ``/``)."""
    found: list[str] = []
    for text in given:
        if not isinstance(text, str):
            continue
        values = []
        m = _USERINFO.match(text)
        if m and m.group("password"):
            password = m.group("password")
            values += [password, *(p for p in re.split(r"[/?#@:]", password) if len(p) >= 6)]
        if "://" in text:
            values += [v.partition("=")[0] for k, _, v in (part.partition("=") for part in _split(text)[1].split("&"))
                       if is_secret_key(k)]
        else:
            key, sep, value = text.partition("=")
            values += [value] if sep and is_secret_key(key) else []
        found += [form for v in values if v for form in (v, unquote_plus(v))]
    return list(dict.fromkeys(found))


#: variables whose names look secret but are the shell's own (``PWD``: the working directory)
_NOT_SECRET_VARIABLES = {"PWD", "OLDPWD"}
#: secret-named variables that hold a setting about a secret, not one: ``RAY_AUTH_MODE=token`` (which Ray sets
#: itself where a token file exists; taken for a secret, every "token" in a message was masked),
#: ``RAY_AUTH_TOKEN_PATH``, ``..._AUTH_TYPE``
_SETTING_VARIABLE = re.compile(r"_(?:MODE|TYPE|KIND|PATH|FILE|DIR|PROVIDER|METHOD|HEADER|ENABLED)$", re.I)

#: values of secret-named variables that are settings, not secrets
_NOT_SECRET = {"", "0", "1", "true", "false", "yes", "no", "on", "off", "none"}


def environment_secrets(environ=None) -> list[str]:
    """The values of this process's secret-named environment variables (``PGPASSWORD``, ``MILVUS_TOKEN``,
    ``QDRANT_API_KEY``, ``CHROMA_TOKEN``, ``HF_TOKEN`` ...), and the password of a ``user:password`` token."""
    environ = os.environ if environ is None else environ
    found = []
    for key, value in environ.items():
        if key.upper() in _NOT_SECRET_VARIABLES or _SETTING_VARIABLE.search(key):
            continue
        if is_secret_key(key) and value.strip().lower() not in _NOT_SECRET:
            found += [value, value.partition(":")[2]]
    return [v for v in dict.fromkeys(found) if len(v) >= 3]


def _hidden(value) -> Any:
    """What a secret key's value becomes: ``***``, unless there is nothing to hide (None, a flag, empty)."""
    empty = isinstance(value, (str, bytes, list, tuple, dict)) and not value
    return value if value is None or isinstance(value, bool) or empty else MASK


def scrub(obj, secrets: Iterable[str] = ()):
    """A copy of a JSON-like object (dicts, lists, tuples, strings, numbers, objects with ``as_dict``) fit to write
    down: each value of a secret key masked, every string passed through :func:`redact_text`."""
    secrets = tuple(secrets)
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {k: _hidden(v) if is_secret_key(k) else scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub(v, secrets) for v in obj) if type(obj) in (list, tuple) else obj
    if hasattr(obj, "as_dict") and callable(obj.as_dict):
        return scrub(obj.as_dict(), secrets)
    return obj
