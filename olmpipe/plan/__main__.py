"""``python -m olmpipe.plan``: see :mod:`olmpipe.plan.cli`."""

import sys

from olmpipe.plan.cli import main

sys.exit(main())
