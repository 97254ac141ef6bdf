"""Registers the test support's fixtures; the helpers themselves live in `testsupport/`
(one module per thing provided: processes, factories, http, purchase, stores, faults,
browser) and tests import them from there, never from this file."""
import pytest

# Before the modules are imported: their asserts report values as the tests' own do.
pytest.register_assert_rewrite("testsupport")

pytest_plugins = [
    "testsupport.processes",
    "testsupport.factories",
    "testsupport.http",
    "testsupport.payments",
    "testsupport.browser",
]
