"""Snakemake script of rule difficulty_filter: the training page index without the pages that carry no signal."""

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "difficulty_filter"):  # noqa: F821
    from olmpipe.difficulty import DifficultyError, FilterSettings, filter_page_index

    try:
        filter_page_index(
            snakemake.input.stats,  # noqa: F821
            snakemake.input.pages,  # noqa: F821
            snakemake.output.pages,  # noqa: F821
            snakemake.output.dropped,  # noqa: F821
            snakemake.output.summary,  # noqa: F821
            FilterSettings(**snakemake.params.filter),  # noqa: F821
            num_generations=int(snakemake.params.num_generations),  # noqa: F821
            batch_pages=int(snakemake.params.batch_pages),  # noqa: F821
            sampled=snakemake.input.summary,  # noqa: F821
        )
    except DifficultyError as exc:
        raise SystemExit(f"difficulty_filter: {exc}") from None
