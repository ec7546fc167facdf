"""``python -m olmpipe.validate``: see :mod:`olmpipe.validate.stage`."""

import sys

from olmpipe.validate.stage import main

sys.exit(main())
