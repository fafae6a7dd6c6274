"""Presentation of job results (HTML reports, charts): no store, no job, only what a result holds."""
