"""``python -m olmpipe`` is the ``olmpipe`` command."""

import sys

from olmpipe.cli import main

sys.exit(main())
