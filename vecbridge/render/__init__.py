"""Presentation of job results: the terminal (tables, lines, JSON), HTML reports and charts; no store, no job, only
what a result holds."""
