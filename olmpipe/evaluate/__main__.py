"""``python -m olmpipe.evaluate``: see :mod:`olmpipe.evaluate.stage`."""

import sys

from olmpipe.evaluate.stage import main

sys.exit(main())
