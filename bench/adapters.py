"""A small non-linear map for comparison: the residual MLP of the Drift-Adapter family, in plain numpy.

Drift-Adapter (Vejendla, EMNLP 2025) compares three adapters trained on a sample of paired old/new embeddings:
orthogonal Procrustes, a low-rank affine map and a compact residual MLP, and reports that the MLP recovers the most
(95-99% of a full re-embed's Recall@10 on its corpora). Its exact architecture is not in the material available
here, so this is our reading of "residual MLP": the centred orthogonal Procrustes map plus a one-hidden-layer
correction,

    f(x) = (u - mu_u) R + mu_y + W2 gelu(W1 u + b1) + b2,     u = x / ||x||,  y unit-normalised,

with ``W2`` initialised at zero (training starts exactly at Procrustes and can only move away from it when that
helps on held-out anchors). Trained with Adam on the mean cosine loss ``1 - cos(f(x), y)`` (or an in-batch
InfoNCE loss, ``loss="infonce"``), weight decay, and early stopping on a seeded validation split of the anchors,
restoring the best epoch. numpy only: torch is never needed.

Measured on wordnet (bench/quality_options.py) it raises the mean cosine between mapped and native vectors but
*lowers* retrieval retention: the regression target pulls outputs towards the conditional mean, which blurs the
fine ranking that Recall@10 measures. It is kept as the comparison the issue asks for, not as a recommendation.
"""
from __future__ import annotations

import numpy as np

from vecbridge.align.base import _as_float
from vecbridge.align.procrustes import OrthogonalProcrustes
from vecbridge.errors import InputError
from vecbridge.validation import check_paired
from vecbridge.vectors import l2_normalize

_C = 0.7978845608028654  # sqrt(2 / pi)


def _gelu(z):
    return 0.5 * z * (1.0 + np.tanh(_C * (z + 0.044715 * z ** 3)))


def _gelu_grad(z):
    t = np.tanh(_C * (z + 0.044715 * z ** 3))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _C * (1.0 + 3 * 0.044715 * z * z)


class ResidualMLPAdapter:
    """Procrustes plus a residual one-hidden-layer MLP (see the module docstring).

    Parameters: ``hidden`` (256), ``epochs`` (100, an upper bound: early stopping), ``lr`` (1e-3, Adam),
    ``weight_decay`` (1e-4, decoupled), ``batch_size`` (256), ``validation_fraction`` (0.1), ``patience`` (10 epochs),
    ``loss`` ("cosine" or "infonce"), ``temperature`` (0.05, InfoNCE only), ``random_state`` (0: initialisation,
    validation split and batch order).

    Fitted: ``base_`` (the OrthogonalProcrustes it corrects), ``W1_``, ``b1_``, ``W2_``, ``b2_``, ``best_epoch_``,
    ``val_cosine_`` (held-out mean cosine at the best epoch), ``n_pairs_``, ``n_features_in_``, ``n_features_out_``.
    There is no closed-form inverse, so ``inverse_transform`` is not provided: map the documents, not the queries.
    """

    def __init__(self, hidden: int = 256, epochs: int = 100, lr: float = 1e-3, weight_decay: float = 1e-4,
                 batch_size: int = 256, validation_fraction: float = 0.1, patience: int = 10, loss: str = "cosine",
                 temperature: float = 0.05, random_state=0):
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.loss = loss
        self.temperature = temperature
        self.random_state = random_state

    def _forward(self, X):
        u = l2_normalize(X)
        base = self.base_.transform(u)
        Z = u @ self.W1_ + self.b1_
        H = _gelu(Z)
        return base + H @ self.W2_ + self.b2_, Z, H

    def fit(self, X_src, Y_tgt):
        if self.loss not in ("cosine", "infonce"):
            raise InputError(f"loss must be 'cosine' or 'infonce', got {self.loss!r}")
        X, Y = check_paired(X_src, Y_tgt)
        X, Y = X.astype(np.float32), l2_normalize(Y.astype(np.float32))
        n, d = X.shape
        rng = np.random.default_rng(self.random_state)
        perm = rng.permutation(n)
        n_val = int(round(n * self.validation_fraction)) if n >= 20 else 0
        val, train = perm[:n_val], perm[n_val:]
        self.base_ = OrthogonalProcrustes(center=True).fit(l2_normalize(X[train]), Y[train])
        # unit-norm inputs have coordinates ~ 1/sqrt(d): scale W1 so pre-activations are ~ N(0, 1)
        self.W1_ = rng.normal(size=(d, self.hidden)).astype(np.float32)
        self.b1_ = np.zeros(self.hidden, np.float32)
        self.W2_ = np.zeros((self.hidden, Y.shape[1]), np.float32)
        self.b2_ = np.zeros(Y.shape[1], np.float32)
        names = ("W1_", "b1_", "W2_", "b2_")
        m1 = {p: np.zeros_like(getattr(self, p)) for p in names}
        m2 = {p: np.zeros_like(getattr(self, p)) for p in names}
        best, best_state, bad, step = -np.inf, None, 0, 0
        self.best_epoch_ = 0
        for epoch in range(int(self.epochs)):
            order = rng.permutation(train)
            for lo in range(0, len(order), self.batch_size):
                b = order[lo:lo + self.batch_size]
                grads = self._grads(X[b], Y[b])
                step += 1
                for p in names:
                    g = grads[p]
                    m1[p] = 0.9 * m1[p] + 0.1 * g
                    m2[p] = 0.999 * m2[p] + 0.001 * g * g
                    upd = (m1[p] / (1 - 0.9 ** step)) / (np.sqrt(m2[p] / (1 - 0.999 ** step)) + 1e-8)
                    P = getattr(self, p)
                    P -= self.lr * (upd + self.weight_decay * P)
            if n_val:
                score = float(np.einsum("ij,ij->i", l2_normalize(self._forward(X[val])[0]), Y[val]).mean())
                if score > best + 1e-5:
                    best, bad, self.best_epoch_ = score, 0, epoch
                    best_state = {p: getattr(self, p).copy() for p in names}
                else:
                    bad += 1
                    if bad >= self.patience:
                        break
        if best_state is not None:
            for p in names:
                setattr(self, p, best_state[p])
        self.val_cosine_ = best if n_val else float("nan")
        self.n_pairs_ = n
        self.n_features_in_ = d
        self.n_features_out_ = Y.shape[1]
        return self

    def _grads(self, Xb, Yb):
        U, Z, H = self._forward(Xb)
        norm = np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-12)
        Un = U / norm
        B = len(Xb)
        if self.loss == "cosine":
            gUn = -Yb / B
        else:
            logits = (Un @ Yb.T) / self.temperature
            P = np.exp(logits - logits.max(axis=1, keepdims=True))
            P /= P.sum(axis=1, keepdims=True)
            P[np.arange(B), np.arange(B)] -= 1.0
            gUn = (P @ Yb) / (self.temperature * B)
        gU = (gUn - np.sum(gUn * Un, axis=1, keepdims=True) * Un) / norm
        gZ = (gU @ self.W2_.T) * _gelu_grad(Z)
        return {"W2_": H.T @ gU, "b2_": gU.sum(axis=0), "W1_": l2_normalize(Xb).T @ gZ, "b1_": gZ.sum(axis=0)}

    def transform(self, X):
        if not hasattr(self, "W2_"):
            raise InputError("ResidualMLPAdapter is not fitted yet: call fit() first")
        X = _as_float(X)
        single = X.ndim == 1
        out = self._forward(X[None, :] if single else X)[0]
        return out[0] if single else out
