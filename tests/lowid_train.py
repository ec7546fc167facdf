"""Train one seed with a reward the tiny model can move (test helper, run under ``accelerate launch``).

    accelerate launch --config_file workflow/accelerate/ddp.yaml --num_processes 2 tests/lowid_train.py \\
        MODEL PAGES TESTS RUN_DIR CONFIG_JSON [SEED]

The configured rewards hardly vary on the random tiny model (zero advantages, no update), so
weight-equality tests of the multi-process path train on the share of low token ids instead.
Test hooks (accelerate's FSDP on CPU ranks, an injected NaN gradient, a probe of how the models are
loaded) follow the environment: tests/support/trainhooks.py.
"""

import json
import os
import sys

from support.trainhooks import install_from_env
from trainkit import LowIdReward

from olmpipe.config import validate_config
from olmpipe.job.health import TrainingStopped
from olmpipe.train.run import train_seed


class LoggedLowIdReward(LowIdReward):
    """:class:`trainkit.LowIdReward` that appends which rank scored how many completions to ``$SCORE_LOG``."""

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        if os.environ.get("SCORE_LOG"):
            with open(os.environ["SCORE_LOG"], "a") as fh:
                fh.write(f"{os.environ.get('RANK', '0')} {len(completion_ids)}\n")
        return super().__call__(prompts, completions, completion_ids, **kwargs)


if __name__ == "__main__":
    model, pages, tests, run_dir, config = sys.argv[1:6]
    seed = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    install_from_env()
    cfg = validate_config(json.loads(config))
    try:
        code = train_seed(cfg, seed=seed, model_path=model, pages=pages, tests_dir=tests, run_dir=run_dir,
                          reward_funcs=[LoggedLowIdReward()])
    except TrainingStopped as exc:  # as python -m olmpipe.train ends such a run
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        code = exc.exit_code
    sys.exit(code)
