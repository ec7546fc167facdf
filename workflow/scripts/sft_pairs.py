"""Snakemake script of rule sft_pairs: the SFT stage's (page image, answer) pairs (olmpipe.sft.pairs)."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.sft.pairs import PairsError, build_pairs

try:
    build_pairs(
        {"sft": snakemake.params.sft},  # noqa: F821
        snakemake.input.pages,  # noqa: F821
        snakemake.output.pairs,  # noqa: F821
        snakemake.output.summary,  # noqa: F821
    )
except PairsError as exc:
    logging.getLogger("sft").error("%s", exc)
    raise SystemExit(f"sft_pairs: {exc}") from None
