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
