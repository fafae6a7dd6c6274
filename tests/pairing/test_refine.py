"""The refinement of a map of GEH's links over both samples (`vecbridge.pairing.learned.refined_pairs`): from links
of which many are wrong, the mutual nearest neighbours under the links' map recover the hidden one-to-one pairs."""
from __future__ import annotations

import numpy as np

from vecbridge.connectors.base import VectorBatch
from vecbridge.pairing.learned import refined_pairs


def _batch(V, prefix):
    return VectorBatch(ids=[f"{prefix}{i}" for i in range(len(V))], vectors=V.astype(np.float32),
                       payloads=[{} for _ in range(len(V))])


def test_refinement_recovers_the_pairs_that_noisy_links_only_hint_at():
    rng = np.random.default_rng(0)
    n, d = 600, 24
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    perm = rng.permutation(n)                       # row perm[i] of Y is item i
    Y = np.empty_like(X)
    Y[perm] = X @ Q + 0.05 * rng.standard_normal((n, d))
    linked = rng.choice(n, 60, replace=False)
    partner = perm[linked].copy()
    wrong = rng.random(60) < 0.4                    # 40% of the links point at another row
    partner[wrong] = rng.integers(0, n, wrong.sum())
    pairs = refined_pairs(X[linked], Y[partner], _batch(X, "a"), _batch(Y, "b"))
    right = np.mean(perm[pairs[:, 0]] == pairs[:, 1])
    assert len(pairs) > 0.9 * n and right > 0.95, (len(pairs), right)
