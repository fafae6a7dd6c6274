"""A connector module whose client library is not installed (for the registry's missing-extra message)."""
import vecbridge_test_client_that_does_not_exist  # noqa: F401
