"""Real engines the connector contract tests run against, one module per engine.

Each module defines:

* ``NAME`` (str): the test id;
* ``unavailable() -> str | None``: why the engine cannot run here (missing package/binary), or None. The test
  suite skips an unavailable engine, but ``.ci/run`` installs all of them, and CI sets
  ``VECBRIDGE_REQUIRE_ENGINES=1`` so that a missing engine fails instead of silently skipping;
* ``start(workdir: pathlib.Path) -> Engine``: starts the engine (once per test session) where ``Engine`` has
  ``url(collection: str) -> str`` giving the URL of a (new) collection, ``stop()`` and optionally
  ``features: set[str]`` (e.g. ``{"add_vector_field"}``).
"""
