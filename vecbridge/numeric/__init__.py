"""Numerical building blocks shared by the estimators, the linking methods and the jobs: nearest neighbours,
polar factors. Bottom layer: numpy and scipy only (faiss or torch when installed)."""
