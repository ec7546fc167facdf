"""Hub models that ``olmpipe plan`` and the config check know without a local folder: the
``config.json`` fields of their published configs (olmOCR's models are fine-tuned Qwen2.5-VL-7B,
same shapes; the SFT configs of olmocr main's ``train/configs/v0.5.0/`` fine-tune
Qwen3-VL-8B-Instruct and Qwen3-VL-30B-A3B-Instruct).

Plain data, so that the config check (:mod:`olmpipe.config`) reads it without importing the memory
plan above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_VISION_QWEN25 = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "in_chans": 3,
                  "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}


def _qwen25_vl(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int,
               tied: bool) -> Mapping[str, Any]:
    return MappingProxyType({
        "model_type": "qwen2_5_vl", "hidden_size": hidden, "intermediate_size": intermediate,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "vocab_size": vocab, "tie_word_embeddings": tied, "max_position_embeddings": 128000,
        "vision_config": {**_VISION_QWEN25, "out_hidden_size": hidden},
    })


_QWEN25_VL_3B = _qwen25_vl(2048, 11008, 36, 16, 2, 151936, True)
_QWEN25_VL_7B = _qwen25_vl(3584, 18944, 28, 28, 4, 152064, False)
_QWEN25_VL_32B = _qwen25_vl(5120, 27648, 64, 40, 8, 152064, False)
_QWEN25_VL_72B = _qwen25_vl(8192, 29568, 80, 64, 8, 152064, False)

#: Qwen3-VL-8B/30B-A3B's vision tower (their config.json vision_config; the 8B's out_hidden_size
#: 4096, the 30B-A3B's 2048). Sources: jax-ml/bonsai bonsai/models/qwen3_vl/modeling.py
#: (Qwen3VLVisionConfig.qwen3vl_8b, commit 73d300e) and hyper_parallel's qwen3_vl_moe registration
#: (_VISION_DEFAULTS), both transcribing the published config.json.
_VISION_QWEN3 = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "in_channels": 3,
                 "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                 "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]}
#: Qwen/Qwen3-VL-8B-Instruct's config.json (text: jax-ml/bonsai Qwen3VLTextConfig.qwen3vl_8b and
#: nvidia/Cosmos-Reason2-8B's config.json, a Qwen3-VL-8B fine-tune; 8,767,123,696 parameters,
#: the "8.77B" of the model card).
_QWEN3_VL_8B = MappingProxyType({
    "model_type": "qwen3_vl", "tie_word_embeddings": False,
    "text_config": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                    "max_position_embeddings": 262144, "tie_word_embeddings": False},
    "vision_config": {**_VISION_QWEN3, "out_hidden_size": 4096},
})
#: Qwen/Qwen3-VL-30B-A3B-Instruct's config.json: 48 layers of 128 experts (8 per token, 768 wide),
#: attention 32 x 128 with 4 KV heads (hyper_parallel's qwen3_vl_moe _DEFAULTS; the Megatron
#: arguments of Qwen3-VL-30B-A3B-Instruct: --num-layers 48 --hidden-size 2048 --num-query-groups 4
#: --kv-channels 128 --moe-ffn-hidden-size 768 --moe-router-topk 8 --num-experts 128).
_QWEN3_VL_30B_A3B = MappingProxyType({
    "model_type": "qwen3_vl_moe", "tie_word_embeddings": False,
    "text_config": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
                    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                    "max_position_embeddings": 262144, "tie_word_embeddings": False, "num_experts": 128,
                    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
                    "mlp_only_layers": []},
    "vision_config": {**_VISION_QWEN3, "out_hidden_size": 2048},
})

#: ``config.json`` fields of hub models the plan knows without a local folder (their published
#: configs; olmOCR's models are fine-tuned Qwen2.5-VL-7B, same shapes; olmocr main's v0.5.0 SFT configs
#: fine-tune Qwen3-VL-8B-Instruct and Qwen3-VL-30B-A3B-Instruct).
KNOWN_MODELS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "Qwen/Qwen2.5-VL-3B-Instruct": _QWEN25_VL_3B,
    "Qwen/Qwen2.5-VL-7B-Instruct": _QWEN25_VL_7B,
    "Qwen/Qwen2.5-VL-32B-Instruct": _QWEN25_VL_32B,
    "Qwen/Qwen2.5-VL-72B-Instruct": _QWEN25_VL_72B,
    "allenai/olmOCR-7B-0725": _QWEN25_VL_7B,
    "allenai/olmOCR-7B-0825": _QWEN25_VL_7B,
    "allenai/olmOCR-2-7B-1025": _QWEN25_VL_7B,
    "Qwen/Qwen3-VL-8B-Instruct": _QWEN3_VL_8B,
    "Qwen/Qwen3-VL-30B-A3B-Instruct": _QWEN3_VL_30B_A3B,
})
