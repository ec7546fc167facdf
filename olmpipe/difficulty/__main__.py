"""``python -m olmpipe.difficulty``: the difficulty stage's command line (see :mod:`olmpipe.difficulty.cli`)."""

import sys

from olmpipe.difficulty.cli import main

if __name__ == "__main__":
    sys.exit(main())
