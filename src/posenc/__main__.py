"""``python -m posenc ...``: the same as the ``posenc`` command."""

import sys

from .cli import main

sys.exit(main())
