"""``python -m olmpipe.report``: see :mod:`olmpipe.report.page`."""

import sys

from olmpipe.report.page import main

sys.exit(main())
