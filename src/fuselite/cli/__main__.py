"""``python -m fuselite.cli``: the same as the ``fuselite`` command."""

import sys

from fuselite.cli import main

sys.exit(main())
