"""``python -m privpix``: the same command as ``privpix``."""

import sys

from privpix.cli import main

sys.exit(main())
