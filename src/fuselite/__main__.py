"""``python -m fuselite``: the command line (see ``fuselite --help``)."""

import sys

from fuselite.cli import main

sys.exit(main())
