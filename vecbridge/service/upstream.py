"""A new model behind an OpenAI-compatible embeddings endpoint (OpenAI's, or any server that speaks its API,
another ``vecbridge serve`` included): called like a local model, a list of texts in, float32 vectors out."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Sequence

import numpy as np

from ..errors import StoreError
from ..secrets import redact_text, redact_url

#: texts per request (the OpenAI API takes at most 2,048 inputs per call)
BATCH = 2048


class UpstreamError(StoreError):
    """The upstream endpoint could not be reached, refused the call, or answered something unusable."""


class UpstreamModel:
    """``POST {base_url}/embeddings`` with ``model`` and the texts; ``key`` goes in ``Authorization: Bearer`` and
    never into a message. Safe to share between threads (a request per call)."""

    def __init__(self, base_url: str, model: str, *, key: str | None = None, timeout: float = 60.0):
        self.url = base_url.rstrip("/") + "/embeddings"
        self.model, self.timeout = model, timeout
        self._key = key
        self.name = f"{model} at {redact_url(base_url)}"

    def _fail(self, what: str) -> UpstreamError:
        return UpstreamError(redact_text(f"the upstream embeddings endpoint {redact_url(self.url)} {what}",
                                         [self._key] if self._key else []))

    def _post(self, texts: list[str]) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": texts, "encoding_format": "float"}).encode()
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                doc = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read())["error"]["message"]
            except Exception:
                detail = exc.reason
            raise self._fail(f"answered {exc.code}: {str(detail).splitlines()[0][:300] if detail else ''}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise self._fail(f"is unreachable ({getattr(exc, 'reason', None) or exc})") from None
        except ValueError:
            raise self._fail("answered something that is not JSON") from None
        try:
            rows = sorted(doc["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise self._fail("answered without a list of embeddings") from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise self._fail(f"answered {len(vectors)} embeddings for {len(texts)} texts")
        return vectors

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        return np.concatenate([self._post(texts[lo:lo + BATCH]) for lo in range(0, len(texts), BATCH)])
