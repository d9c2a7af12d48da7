"""``python -m reaper``: the ``reaper`` command."""

import sys

from reaper.edges.cli import main

sys.exit(main())
