#!/usr/bin/env python
"""Compare two results folders record by record, modulo timings (olmpipe.rundiff).

    python scripts/compare_runs.py results-before results-after

Prints each compared file and every difference; exit status 1 when anything differs or nothing
was compared.
"""

import sys
from pathlib import Path

from olmpipe.rundiff import compare_results


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    missing = [folder for folder in argv if not Path(folder).is_dir()]
    if missing:
        sys.stderr.write(f"compare_runs: no such results folder: {', '.join(missing)}\n")
        return 2
    try:
        compared, differences = compare_results(*argv)
    except ValueError as exc:  # a malformed line: the reader names the file and line
        sys.stderr.write(f"compare_runs: {exc}\n")
        return 2
    for name in compared:
        sys.stdout.write(f"compared {name}\n")
    for difference in differences:
        sys.stdout.write(f"DIFFERS {difference}\n")
    sys.stdout.write(f"{len(compared)} files compared, {len(differences)} differences\n")
    return 1 if differences or not compared else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
