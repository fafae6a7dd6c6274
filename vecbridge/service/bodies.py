"""The documents the service reads and writes: OpenAI's embeddings request and response (what its clients send and
expect), the search request, and the error document, ``{"error": {"message", "type", "code"}}`` as OpenAI writes
it. Every refusal is one line naming what to send instead."""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

#: inputs per embeddings request (OpenAI's own limit)
MAX_INPUTS = 2048
#: results per query a search may ask for
MAX_K = 1000
ENCODINGS = ("float", "base64")


class BadRequest(InputError):
    """A request the service cannot answer as sent: HTTP ``status`` (400 unless said), OpenAI's error ``type``."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code


def error_document(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


try:   # a request's vectors are its bulk: orjson reads them about 5x faster (the [serve] extra installs it)
    from orjson import loads as _loads
except ImportError:   # pragma: no cover - the standard library's, where orjson is not installed
    _loads = json.loads


def parse_json(body: bytes) -> dict:
    """The request's JSON object."""
    try:
        doc = _loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body is not JSON: send a JSON object with Content-Type: application/json") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"the body is a JSON {type(doc).__name__}, not an object")
    return doc


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class EmbeddingsRequest:
    texts: list[str]
    encoding_format: str
    dimensions: int | None
    model: str | None


def embeddings_request(doc: dict) -> EmbeddingsRequest:
    """``{"model", "input": text or [texts], "encoding_format": float|base64, "dimensions"?}``; token arrays are
    refused (the model here reads texts)."""
    if "input" not in doc:
        raise BadRequest("the request has no 'input': send a text or a list of texts")
    given = doc["input"]
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list):
        raise BadRequest("'input' must be a text or a list of texts")
    if any(_is_int(t) or isinstance(t, list) for t in texts):
        raise BadRequest("token arrays are not supported: send the texts themselves as 'input'")
    if not texts:
        raise BadRequest("'input' is an empty list: send at least one text")
    if len(texts) > MAX_INPUTS:
        raise BadRequest(f"'input' holds {len(texts):,} texts; send at most {MAX_INPUTS:,} per request")
    wrong = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if wrong is not None:
        raise BadRequest(f"'input' item {wrong} is a {type(texts[wrong]).__name__}, not a text")
    empty = next((i for i, t in enumerate(texts) if not t), None)
    if empty is not None:
        raise BadRequest(f"'input' item {empty} is an empty text")
    encoding = doc.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise BadRequest(f"'encoding_format' must be float or base64, got {str(encoding)[:40]!r}")
    dims = doc.get("dimensions")
    if dims is not None and (not _is_int(dims) or dims < 1):
        raise BadRequest("'dimensions' must be a positive whole number")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a text")
    return EmbeddingsRequest(texts, encoding, dims, model)


def _encoded(vector: np.ndarray, encoding: str):
    if encoding == "base64":   # little-endian float32, as OpenAI's API and its clients read it
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def words(texts: list[str]) -> int:
    """What ``usage`` counts: words (white-space separated), not the model's tokens."""
    return sum(len(t.split()) for t in texts)


def embeddings_response(vectors: np.ndarray, request: EmbeddingsRequest, model: str, space: dict) -> dict:
    """OpenAI's response, and under ``vecbridge`` the space the vectors are in and the stage that answered."""
    if request.dimensions is not None and request.dimensions != vectors.shape[1]:
        raise BadRequest(f"'dimensions' {request.dimensions} is not what this service returns: its vectors have "
                         f"{vectors.shape[1]} dimensions (the space the index is in now); leave 'dimensions' out")
    tokens = words(request.texts)
    return {"object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": _encoded(v, request.encoding_format)}
                     for i, v in enumerate(vectors)],
            "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "vecbridge": {key: space.get(key) for key in ("space", "stage", "serving", "alignment", "metric")}}


@dataclass
class SearchRequest:
    texts: list[str] | None
    vectors: np.ndarray | None
    old_vectors: np.ndarray | None
    k: int


def _matrix(value, name: str, dim: int | None) -> np.ndarray:
    """A list of equally long lists of finite numbers, ``dim`` long where given (read by numpy in one pass: a
    request's vectors are its bulk)."""
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise BadRequest(f"'{name}' must be a non-empty list of vectors (lists of numbers)")
    try:
        matrix = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        lengths = {len(row) for row in value}
        if len(lengths) > 1:
            raise BadRequest(f"the vectors of '{name}' differ in length "
                             f"({', '.join(map(str, sorted(lengths)))})") from None
        raise BadRequest(f"'{name}' must hold numbers only") from None
    if matrix.ndim != 2:
        raise BadRequest(f"'{name}' must hold numbers only")
    if dim is not None and matrix.shape[1] != dim:
        raise BadRequest(f"'{name}' must be {dim}-d vectors, got {matrix.shape[1]}-d")
    with np.errstate(over="ignore"):
        matrix = matrix.astype(np.float32)
    if not np.isfinite(matrix).all():
        raise BadRequest(f"'{name}' holds a value that is not a finite float32 number")
    return matrix


def search_request(doc: dict, *, new_dim: int | None, old_dim: int | None) -> SearchRequest:
    """``{"texts": [...]}`` or ``{"vectors": [[...]], "old_vectors"?: [[...]]}`` (the new model's vectors; the
    old model's of the same queries for fusion), and ``"k"`` (10)."""
    k = doc.get("k", 10)
    if not _is_int(k) or not 1 <= k <= MAX_K:
        raise BadRequest(f"'k' must be a whole number from 1 to {MAX_K}")
    has_texts, has_vectors = "texts" in doc, "vectors" in doc
    if has_texts == has_vectors:
        raise BadRequest("send 'texts' (a list of query texts) or 'vectors' (new-model query vectors), one of them")
    if has_texts:
        texts = doc["texts"]
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise BadRequest("'texts' must be a non-empty list of non-empty texts")
        if len(texts) > MAX_INPUTS:
            raise BadRequest(f"'texts' holds {len(texts):,} queries; send at most {MAX_INPUTS:,} per request")
        if "old_vectors" in doc:
            raise BadRequest("'old_vectors' goes with 'vectors': with 'texts' the service encodes them itself")
        return SearchRequest(texts, None, None, k)
    vectors = _matrix(doc["vectors"], "vectors", new_dim)
    if len(vectors) > MAX_INPUTS:
        raise BadRequest(f"'vectors' holds {len(vectors):,} queries; send at most {MAX_INPUTS:,} per request")
    old = None
    if doc.get("old_vectors") is not None:
        old = _matrix(doc["old_vectors"], "old_vectors", old_dim)
        if len(old) != len(vectors):
            raise BadRequest(f"'old_vectors' has {len(old)} rows for {len(vectors)} queries: give the old model's "
                             f"vectors of the same queries, row for row")
    return SearchRequest(None, vectors, old, k)


def search_response(ids: list[list], scores: np.ndarray, answered: dict) -> dict:
    """Per query its ids and scores, best first; under ``stage`` and ``serving`` what answered."""
    scores = np.asarray(scores)
    return {"object": "search", **answered,
            "results": [{"ids": [i.item() if isinstance(i, np.generic) else i for i in row],
                         "scores": [float(s) for s in scores[qi, :len(row)]]} for qi, row in enumerate(ids)]}
