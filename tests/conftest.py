import os

import pytest

from privpix.data import resolve_data_dir
from privpix.errors import DataError


@pytest.fixture(scope="session")
def data_dir():
    """The staged datasets. Locally a missing directory skips; in CI (CI=true) it is an error."""
    try:
        return resolve_data_dir()
    except DataError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"real datasets not available: {exc}")


@pytest.fixture
def run():
    """Invoke the ``privpix`` CLI in-process; arguments may be any objects (converted with str)."""
    from click.testing import CliRunner

    from privpix.cli import main

    runner = CliRunner()

    def call(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return call
