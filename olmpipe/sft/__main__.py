"""``python -m olmpipe.sft``: see :mod:`olmpipe.sft.cli`."""

import sys

from olmpipe.sft.cli import main

sys.exit(main())
