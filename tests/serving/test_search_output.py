"""Search results show what was found (the stored text), not only ids."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect


def test_search_shows_each_hits_stored_text(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 16)).astype(np.float32)
    Y = X @ np.linalg.qr(rng.normal(size=(16, 16)))[0].astype(np.float32)
    old = connect(f"file://{tmp_path / 'old'}")
    old.create(dim=16)
    old.upsert(VectorBatch([f"d{i}" for i in range(50)], X,
                           [{"text": f"document number {i}\nsecond line"} if i % 2 else {} for i in range(50)]))
    Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)).save(tmp_path / "a.vb")
    np.save(tmp_path / "q.npy", Y[[1, 2]])
    args = ["search", "--wrap", f"file://{tmp_path / 'old'}={tmp_path / 'a.vb'}", "--vectors", str(tmp_path / "q.npy"),
            "-k", "3"]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    shown = " ".join(out.output.split())     # the console wraps long lines
    assert "1. d1 1.0000 document number 1 second line" in shown
    rows = json.loads(CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False).output)
    assert rows[0][0]["id"] == "d1" and rows[0][0]["text"] == "document number 1\nsecond line"
    assert rows[1][0]["id"] == "d2" and "text" not in rows[1][0]      # a record without text shows none
