"""What olmpipe reads from transformers models beyond their documented use.

Checked against transformers 5.17 and 5.24 (importing this module checks the installed release:
:func:`olmpipe.compat.versions.require`); ``tests/test_compat.py`` runs it on real models in both
environments.
"""

from __future__ import annotations

from typing import Any

from olmpipe.compat.versions import UpstreamChangedError, require

require("transformers")


def tied_weight_names(model: Any) -> set[str]:
    """Names of the model's parameters that are another parameter (tied), so never stored in a checkpoint.

    transformers 5 records them per instance at ``post_init`` in ``all_tied_weights_keys``
    (``{tied name: source name}``, ``modeling_utils.py:1300-1317`` in 5.24, 1305-1322 in 5.17), for
    the ties the model's config asks for. The class attribute ``_tied_weights_keys`` (private)
    lists the ties a model *can* have: a Qwen2.5-VL with ``tie_word_embeddings: false`` (the 3B and
    7B checkpoints) still names ``lm_head.weight`` there, so a checkpoint without its trained
    ``lm_head`` would pass for complete.
    """
    tied = getattr(model, "all_tied_weights_keys", None)
    if tied is None:
        raise UpstreamChangedError(f"{type(model).__name__} has no all_tied_weights_keys (transformers 5.17-5.24 "
                                   "set it in PreTrainedModel.post_init); update olmpipe/compat/transformers.py")
    return set(tied)


#: transformers 5.24 renamed ``gradient_checkpointing`` to ``activation_checkpointing``; older
#: releases (5.17, vLLM 0.31's and the GPU image's) know only the old names.
RENAMED = {"activation_checkpointing": "gradient_checkpointing",
           "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def for_installed(knobs: dict[str, Any], config_class: Any) -> dict[str, Any]:
    """``knobs`` with renamed fields spelled as the installed TRL config class (``GRPOConfig``,
    ``SFTConfig``, both ``TrainingArguments``) spells them."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(config_class)}
    out = dict(knobs)
    for new, old in RENAMED.items():
        if new in out and new not in fields and old in fields:
            value = out.pop(new)
            if not out.get(old):  # an explicitly set old name wins
                out[old] = value
    return out
