"""Fit and apply maps between embedding spaces (orthogonal Procrustes and the baselines it is judged against)."""
from ..numeric.estimator import Estimator, clone
from .artifact import Alignment
from .baselines import LinearMap, NoMap
from .clustered import ClusteredProcrustes
from .diagnostics import dot_product_discrepancy, mean_squared_residual, procrustes_bound
from .minivec2vec import MiniVec2Vec
from .moments import PairMoments
from .procrustes import FewPairsWarning, OrthogonalProcrustes

__all__ = ["Alignment", "OrthogonalProcrustes", "ClusteredProcrustes", "MiniVec2Vec", "LinearMap", "NoMap",
           "PairMoments", "FewPairsWarning", "dot_product_discrepancy", "procrustes_bound", "mean_squared_residual",
           "Estimator", "clone"]
