#!/usr/bin/env python
"""Print every disagreement between olmpipe.bench and the reference verdicts of a parity folder.

    python scripts/parity.py [../shared/bench/parity-dev] [--skip-math] [--json report.json]

Same as ``olmpipe bench parity``: one ``DISAGREE`` line per pair (type, test id, completion file,
JSONL file, the reference's verdict, our reason), one ``REWARD`` line per completion whose micro or
macro GRPO reward differs, then agreement per type. Exit status 1 below 99.5% overall / 99% per type.
"""

import sys

from olmpipe.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(["parity", *sys.argv[1:]]))
