"""What one service serves, as the command line said it: an upgrade's state file, or one old collection wrapped in
an alignment, or neither (the model's own vectors); the models and where they run; who may call it. Travels to
uvicorn's worker processes as one environment variable that holds names of secrets, never their values."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..errors import UsageError

#: the environment variable a worker process reads its configuration from
ENVIRONMENT = "VECBRIDGE_SERVE_CONFIG"
#: where an upstream endpoint's key is read from when no --upstream-key-env is given
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def default_threads() -> int:
    """Twice the CPU cores, at most 8: a Python process's threads overlap the store's and the model's waits, but past
    that they queue for the interpreter's lock and the slowest answers grow with them (``bench/serve.py``, 2 cores:
    4 threads answer as many searches a second as 8, with p99 1.2x the store's own instead of 2.1x)."""
    return max(1, min(8, 2 * (os.cpu_count() or 1)))


@dataclass
class ServeConfig:
    """``state``: an upgrade's state file; ``wrap``: ``(old collection URL, alignment file)``; ``model``: the new
    model (default: the upgrade's), a spec for :func:`~vecbridge.runtime.models.load_model` or, with ``upstream``,
    the model name sent to that OpenAI-compatible endpoint (its key in the environment variable ``upstream_key_env``);
    ``old_model``: encodes each text query a second time for dual-query fusion; ``token_env``: the environment
    variable holding the bearer token clients must send; ``threads``: blocking calls at a time per process
    (default :func:`default_threads`);
    ``rerank``: an upgrade's searches re-score their top ``rerank`` candidates with the new model and write back
    what they embed as native vectors (the cascade; 0: off; None: what ``upgrade tune --rerank`` tuned)."""

    state: str | None = None
    wrap: tuple[str, str] | None = None
    model: str | None = None
    old_model: str | None = None
    upstream: str | None = None
    upstream_key_env: str | None = None
    token_env: str | None = None
    device: str = "auto"
    model_batch_size: int | None = None
    precision: str = "auto"
    threads: int | None = None
    force: bool = False
    rerank: int | None = None

    def __post_init__(self):
        if self.threads is None:
            self.threads = default_threads()
        if self.wrap is not None:
            self.wrap = tuple(self.wrap)

    def check(self) -> "ServeConfig":
        """Refuse what cannot be served, in one line (exit 2), before anything is loaded."""
        if self.state and self.wrap:
            raise UsageError("serve one upgrade (--state) or one wrapped collection (--wrap), not both")
        if not self.state and not self.model:
            raise UsageError("name the new model (--model): only an upgrade's state file names its own")
        if self.upstream_key_env and not self.upstream:
            raise UsageError("--upstream-key-env applies to an --upstream endpoint")
        if self.upstream and not self.upstream.startswith(("http://", "https://")):
            raise UsageError("--upstream takes the http(s) base URL of an OpenAI-compatible API, e.g. "
                             "https://api.openai.com/v1")
        if self.rerank and not self.state:
            raise UsageError("--rerank re-ranks and writes back an upgrade's records: it needs --state")
        if self.old_model and not (self.state or self.wrap):
            raise UsageError("--old-model fuses searches of an upgrade (--state) or a wrapped collection (--wrap)")
        for option, name in (("--token-env", self.token_env), ("--upstream-key-env", self.upstream_key_env)):
            if name is not None and not os.environ.get(name):
                raise UsageError(f"{option} names the environment variable {name}, which is not set here")
        return self

    def token(self) -> str | None:
        """The bearer token clients must send (None: no token asked)."""
        return os.environ.get(self.token_env) if self.token_env else None

    def upstream_key(self) -> str | None:
        """The upstream endpoint's key: from ``upstream_key_env``, else ``OPENAI_API_KEY`` where it is set."""
        return os.environ.get(self.upstream_key_env or DEFAULT_KEY_ENV) or None

    def to_environment(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_environment(cls) -> "ServeConfig":
        doc = os.environ.get(ENVIRONMENT)
        if not doc:
            raise UsageError(f"{ENVIRONMENT} is not set: start the service with `vecbridge serve`")
        return cls(**json.loads(doc))
