"""The alignment artifact: bit-exact round trip, no pickle, and refusal of every damaged file."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from vecbridge.align import Alignment, LinearMap, NoMap, OrthogonalProcrustes
from vecbridge.errors import ArtifactError, InputError


@pytest.fixture
def fitted():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 24))
    Y = np.pad(X, ((0, 0), (0, 8))) @ np.linalg.qr(rng.normal(size=(32, 32)))[0] + 0.1 * rng.normal(size=(500, 32))
    return OrthogonalProcrustes(center=True).fit(X, Y), X


def _alignment(est):
    return Alignment.from_estimator(est, source_model="old-model", target_model="new-model", metric="cosine",
                                    anchors={"method": "shared-ids", "n": 500})


def test_round_trip_is_bit_exact(tmp_path, fitted):
    est, X = fitted
    a = _alignment(est)
    path = a.save(tmp_path / "align.vb")
    b = Alignment.load(path)
    assert set(a.tensors) == set(b.tensors)
    for name in a.tensors:
        assert a.tensors[name].dtype == b.tensors[name].dtype == np.float64
        assert a.tensors[name].tobytes() == b.tensors[name].tobytes()
    assert b.metadata == a.metadata
    assert b.transform(X).tobytes() == a.transform(X).tobytes()
    assert b.fingerprint == a.fingerprint
    np.testing.assert_allclose(a.transform(X), est.transform(X), atol=1e-12)
    np.testing.assert_allclose(a.inverse_transform(a.transform(X)), est.inverse_transform(est.transform(X)),
                               atol=1e-12)


def test_metadata_records_provenance(tmp_path, fitted):
    b = Alignment.load(_alignment(fitted[0]).save(tmp_path / "a.vb"))
    m = b.metadata
    assert m["schema_version"] == 1 and m["kind"] == "orthogonal"
    assert (m["source_model"], m["target_model"], m["source_dim"], m["target_dim"]) == ("old-model", "new-model", 24, 32)
    assert m["centered"] is True and m["normalization"] == "none" and m["metric"] == "cosine"
    assert m["fit"]["n_pairs"] == 500 and m["fit"]["bound"] >= m["fit"]["residual"]
    assert m["anchors"]["method"] == "shared-ids"
    assert m["created_at"] and m["vecbridge_version"]


def test_baselines_round_trip_too(tmp_path):
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(100, 6)), rng.normal(size=(100, 4))
    for est in (LinearMap(alpha=0.1).fit(X, Y), NoMap().fit(X, Y)):
        b = Alignment.load(Alignment.from_estimator(est).save(tmp_path / "x.vb"))
        np.testing.assert_allclose(b.transform(X), est.transform(X), atol=1e-12)


def test_l2_normalisation_is_applied_at_serve_time(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 8))
    est = OrthogonalProcrustes().fit(X / np.linalg.norm(X, axis=1, keepdims=True), X / np.linalg.norm(X, axis=1, keepdims=True))
    a = Alignment.from_estimator(est, normalization="l2")
    np.testing.assert_allclose(np.linalg.norm(a.transform(5 * X), axis=1), 1.0, atol=1e-12)


def test_truncated_file_is_refused(tmp_path, fitted):
    path = _alignment(fitted[0]).save(tmp_path / "a.vb")
    data = path.read_bytes()
    for cut in (len(data) - 100, 50, 4):
        (tmp_path / "t.vb").write_bytes(data[:cut])
        with pytest.raises(ArtifactError, match="truncated or corrupt"):
            Alignment.load(tmp_path / "t.vb")


def test_tampered_tensor_bytes_are_refused(tmp_path, fitted):
    path = _alignment(fitted[0]).save(tmp_path / "a.vb")
    data = bytearray(path.read_bytes())
    data[-9] ^= 0x01   # flip one bit inside the last tensor
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        Alignment.load(path)


def _rewrite_metadata(path, edit):
    """Rewrite the JSON header of a safetensors file (keeping the tensor bytes)."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = json.loads(header["__metadata__"]["vecbridge"])
    edit(meta)
    header["__metadata__"]["vecbridge"] = json.dumps(meta, sort_keys=True)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def test_tampered_metadata_is_refused(tmp_path, fitted):
    path = _alignment(fitted[0]).save(tmp_path / "a.vb")
    _rewrite_metadata(path, lambda m: m.update(target_model="someone-else"))
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        Alignment.load(path)


def test_wrong_schema_version_is_refused(tmp_path, fitted):
    path = _alignment(fitted[0]).save(tmp_path / "a.vb")
    _rewrite_metadata(path, lambda m: m.update(schema_version=99))
    with pytest.raises(ArtifactError, match="schema version 99 is not supported"):
        Alignment.load(path)


def test_other_files_are_refused(tmp_path):
    with pytest.raises(ArtifactError, match="not found"):
        Alignment.load(tmp_path / "missing.vb")
    (tmp_path / "junk.vb").write_bytes(b"\x80\x04\x95pickle-looking junk")
    with pytest.raises(ArtifactError):
        Alignment.load(tmp_path / "junk.vb")
    from safetensors.numpy import save_file

    save_file({"w": np.eye(2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ArtifactError, match="not a vecbridge alignment"):
        Alignment.load(tmp_path / "plain.safetensors")


def test_save_is_atomic(tmp_path, fitted, monkeypatch):
    path = _alignment(fitted[0]).save(tmp_path / "a.vb")
    before = path.read_bytes()
    import safetensors.numpy

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.numpy, "save_file", boom)
    with pytest.raises(OSError):
        _alignment(fitted[0]).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.vb"]


def test_wrong_dimension_is_refused_at_apply_time(fitted):
    a = _alignment(fitted[0])
    with pytest.raises(InputError, match="dimension 24"):
        a.transform(np.ones((2, 32)))
    with pytest.raises(InputError, match="dimension 32"):
        a.inverse_transform(np.ones((2, 24)))
    with pytest.raises(InputError, match="not fitted"):
        Alignment.from_estimator(OrthogonalProcrustes())


def test_extra_metadata_cannot_overwrite_what_from_estimator_sets(fitted):
    est, _ = fitted
    a = Alignment.from_estimator(est, source={"url": "file://x"}, note="kept")
    assert a.metadata["source"] == {"url": "file://x"} and a.metadata["note"] == "kept"
    for key in ("kind", "fit", "scale", "sha256", "vecbridge_version"):
        with pytest.raises(InputError, match=f"{key} is a reserved metadata key"):
            Alignment.from_estimator(est, **{key: "forged"})
    with pytest.raises(InputError, match="fit, kind are reserved"):
        Alignment.from_estimator(est, kind="linear", fit={})
