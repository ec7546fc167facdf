"""The SFT stage: supervised fine-tuning on (page image, reference answer) pairs before GRPO.

    olmpipe sft pairs --config config/learn.yaml           # results/sft/pairs.jsonl (rule sft_pairs)
    python -m olmpipe.sft --seed 0 --model results/model/tiny --pages results/sft/pairs.jsonl \\
        --tests-dir results/validate/tests --run-dir results/sft/seed0   # one seed (rule sft_seed)

TRL's ``SFTTrainer`` in GRPO's prompt and answer format (the olmOCR prompt; olmOCR front matter +
page text), through the training job every trainer runs (:mod:`olmpipe.job`): seeds, LoRA, float32
master weights, bitwise resume, SIGTERM checkpoints, the memory plan. GRPO then starts from the
soup of the SFT seeds (``results/sft/soup/model``). docs/sft.md.

- :mod:`~olmpipe.sft.pairs`: the pairs, from a bench candidate folder or a folder of page + text;
- :mod:`~olmpipe.sft.steps`: SFT's steps of the training job (:class:`~olmpipe.sft.steps.SFTSteps`);
- :mod:`~olmpipe.sft.args`: the seed's ``SFTConfig``;
- :mod:`~olmpipe.sft.trainer`: ``SFTTrainer`` with a resume that restores every weight;
- :mod:`~olmpipe.sft.cli`: ``olmpipe sft`` (``pairs``, or one seed's job).
"""
