"""``python -m despina`` runs the ``despina`` command."""

import sys

from despina.cli import main

sys.exit(main())
