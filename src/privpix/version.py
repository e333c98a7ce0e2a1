"""privpix's version (pyproject.toml's), in a module of its own: any layer may import it without importing the
package root, whose lazy user API reaches every layer; and the check that a dependency is the release a fast path
was verified against."""

import functools

__version__ = "0.1.0"


@functools.cache
def installed_is(distribution: str, version: str) -> bool:
    """Whether ``distribution`` is installed at exactly ``version``: a fast path that reproduces a library's results
    through its private helpers is taken only on the release it was compared with bit for bit."""
    # importlib.metadata (37 modules: email, zipfile, csv, ...) only when asked: every privpix module imports this one.
    from importlib import metadata

    try:
        return metadata.version(distribution) == version
    except metadata.PackageNotFoundError:
        return False
