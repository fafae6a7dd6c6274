"""Numerical building blocks shared by the estimators, the linking methods and the jobs: nearest neighbours,
polar factors, k-means, and the estimator base class (here because the linking layer sits below the estimators).
Bottom layer: numpy and scipy only (faiss or torch when installed)."""
