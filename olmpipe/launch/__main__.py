"""``python -m olmpipe.launch``: see :mod:`olmpipe.launch.cli`."""

import sys

from olmpipe.launch.cli import main

sys.exit(main())
