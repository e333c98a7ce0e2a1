"""privpix: publish image data privately, and measure what the publication protects."""

from privpix.errors import BudgetExceededError, DataError, ParameterError, PrivpixError
from privpix.guarantees import Guarantee

__version__ = "0.1.0"

__all__ = ["BudgetExceededError", "DataError", "Guarantee", "ParameterError", "PrivpixError", "__version__"]
