"""``python -m olmpipe.train``: see :mod:`olmpipe.train.cli`."""

import sys

from olmpipe.train.cli import main

sys.exit(main())
