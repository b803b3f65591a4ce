"""Suite-wide settings.

tests/verify (`make verify`) checks real hosts: it is collected only when an inventory is
named (`--inventory FILE`), so a plain `pytest tests` never contacts inventory.py's hosts.
"""

from pathlib import Path

VERIFY = Path(__file__).resolve().parent / "verify"


def pytest_addoption(parser):
    parser.addoption("--inventory", default=None, help="pyinfra inventory for tests/verify (make verify)")


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--inventory") is None and VERIFY in (collection_path, *collection_path.parents):
        return True
    return None
