"""privpix's version (pyproject.toml's), in a module of its own: any layer may import it without importing the
package root, whose lazy user API reaches every layer."""

__version__ = "0.1.0"
