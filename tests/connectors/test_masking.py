"""Secrets a client echoes never reach a message, and masking them does not garble the rest of it."""
from __future__ import annotations

from types import SimpleNamespace

from vecbridge.connectors.base import Collection


def _masked(secrets, detail):
    return Collection._masked(SimpleNamespace(_secrets=lambda: secrets), detail)


def test_short_secret_masked_where_it_stands_alone_only():
    got = _masked(["p"], 'connection to "u:p@host" failed: password=p; operation not supported')
    assert got == 'connection to "u:***@host" failed: password=***; operation not supported'


def test_long_secret_masked_everywhere():
    got = _masked(["hunter22secret"], "token xhunter22secretx rejected")
    assert "hunter22secret" not in got and got == "token x***x rejected"
