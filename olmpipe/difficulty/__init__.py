"""The difficulty stage: which training pages can GRPO learn from at all?

    olmpipe difficulty                 # sample k completions per train page, score, filter
    olmpipe difficulty sample          # results/difficulty/{generations,stats}.jsonl, summary.json
    olmpipe difficulty filter          # results/difficulty/{train_pages,dropped}.jsonl, filter.json

GRPO learns only from groups whose completions score differently: when all completions of a page
pass every test (or all fail), every advantage is zero and the group's generation and backward
pass are spent for nothing. The stage samples ``k`` completions per training page with the model
being trained, at the trainer's sampling settings, through the baseline's generation backends
(:mod:`olmpipe.difficulty.sample`), scores them with the trainer's rewards
(:mod:`olmpipe.difficulty.score`) and, with ``train.difficulty.enabled``, gives training a page
index without the pages that carry no signal (:mod:`olmpipe.difficulty.filter`). Settings:
:mod:`olmpipe.difficulty.settings`; files: :mod:`olmpipe.records.difficulty`; docs/difficulty.md.
"""

from olmpipe.difficulty.filter import drop_reason, filter_page_index
from olmpipe.difficulty.sample import run_difficulty
from olmpipe.difficulty.settings import DifficultyError, FilterSettings, decoding_settings, job_config

__all__ = [
    "DifficultyError",
    "FilterSettings",
    "decoding_settings",
    "drop_reason",
    "filter_page_index",
    "job_config",
    "run_difficulty",
]
