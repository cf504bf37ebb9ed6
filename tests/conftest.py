"""Shared pytest configuration.

Append further plugins to ``pytest_plugins`` rather than replacing the list.
"""

pytest_plugins = [
    "pytest_jupyter.jupyter_server",
]
