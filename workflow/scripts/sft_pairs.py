"""Snakemake script of rule sft_pairs: the SFT stage's (page image, answer) pairs (olmpipe.sft.pairs)."""

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "sft_pairs"):  # noqa: F821
    from olmpipe.sft.pairs import PairsError, build_pairs

    try:
        build_pairs(
            {"sft": snakemake.params.sft},  # noqa: F821
            snakemake.input.pages,  # noqa: F821
            snakemake.output.pairs,  # noqa: F821
            snakemake.output.summary,  # noqa: F821
        )
    except PairsError as exc:
        raise SystemExit(f"sft_pairs: {exc}") from None
