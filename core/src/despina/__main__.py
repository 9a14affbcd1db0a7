"""``python -m despina`` runs the ``despina`` command."""

import sys

from despina.serving.cli import main

sys.exit(main())
