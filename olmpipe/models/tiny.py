"""The embedded default model: a tiny VLM with random weights and a locally trained tokenizer.

It lets a new user run the whole chain (generation, GRPO, souping, evaluation) on a laptop with no
GPU and no network before pointing the workflow at a real checkpoint. The model is built from the
same classes as the real one of its architecture (``model.tiny.architecture``: Qwen2.5-VL by
default, or Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE; :mod:`olmpipe.models.architectures`), saved as an ordinary
Hugging Face folder, and loaded back by :func:`olmpipe.models.load.load_model_and_processor`, the same
function that loads a real model folder.

    python -m olmpipe.models.tiny results/model/tiny --seed 0 --hidden-size 64 --architecture qwen3_vl

Facts this module works around (transformers 5.x on a CPU-only torch without torchvision):
- the stock Qwen VL processors require a video processor, which needs torchvision; the tiny
  model is saved with the image-only processor of :mod:`olmpipe.models.load`, which takes none and
  saves itself as the stock processor, so that vLLM can load the folder (docs/vllm.md);
- the model config's image/video/vision token ids must equal the tokenizer's ids;
- the text model's ``mrope_section`` must sum to ``head_dim / 2``;
- Qwen3-VL's vision position embeddings are interpolated from a square grid
  (``num_position_embeddings`` must be a square); its DeepStack layers inject into the first
  language-model layers, so there are no more of them than language-model layers;
- Qwen3-VL-MoE's fused expert matrices are kept non-square (``2 * moe_intermediate_size`` and
  ``moe_intermediate_size`` differ from ``hidden_size``): transformers tells their saved layout from
  the live one by shape alone (:func:`olmpipe.models.architectures.expert_tensor_to_hub`);
- the vision tower's ``out_hidden_size`` must equal the text hidden size;
- vLLM's CPU attention rejects small head sizes (``head_dim=16``: "Unsupported CPU attention
  configuration"); the text model therefore uses heads of 64 (:data:`TEXT_HEAD_DIM`) wherever
  ``hidden_size`` allows it: one head at the default ``hidden_size`` 64, which keeps the weights
  (and a CPU training step) the size they were with four heads of 16.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from olmpipe.models.architectures import ARCHITECTURES, Architecture, ImageBudget, publish_expert_layout
from olmpipe.models.load import CHAT_TEMPLATE, image_only_processor_class
from olmpipe.records.models import TINY_SPEC_NAME

logger = logging.getLogger(__name__)

# Qwen2/Qwen2.5-VL special tokens, in the order they get ids after the learned vocabulary.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Image budget of the tiny model's processor, in language-model tokens: pages are resized to at most
# this many, so that a 1288 px page becomes ~64 image tokens and a GRPO step stays around a second on
# one CPU thread (Qwen2.5-VL: 64 x 28 x 28 = 50176 pixels; Qwen3-VL: 64 x 32 x 32).
TINY_MAX_TOKENS = 64
TINY_MIN_TOKENS = 16
DEFAULT_ARCHITECTURE = "qwen2_5_vl"
# Qwen3-VL-MoE: experts and experts per token of the tiny model.
TINY_EXPERTS = 4
TINY_EXPERTS_PER_TOKEN = 2

# Head size of the text model's attention: one vLLM's CPU attention supports (it rejects 16).
TEXT_HEAD_DIM = 64

@dataclass(frozen=True)
class TinySpec:
    """Shape of the embedded model; recorded in ``olmpipe_tiny.json`` next to the weights."""

    seed: int = 0
    hidden_size: int = 64
    num_layers: int = 2
    vocab_size: int = 1024
    num_heads: int = 1
    vision_hidden_size: int = 32
    vision_depth: int = 2
    vision_heads: int = 2
    architecture: str = DEFAULT_ARCHITECTURE
    image_mean: float | None = None


def _training_corpus(extra_texts: list[str] | None) -> list[str]:
    """Text the tokenizer learns from: the bundled bench outputs, the prompt, markdown and YAML."""
    corpus: list[str] = list(extra_texts or [])
    root = Path(__file__).resolve().parents[2] / "data" / "bench"
    for md in sorted(root.glob("**/*.md")):
        corpus.append(md.read_text(encoding="utf-8", errors="replace"))
    corpus += [
        (
            "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
            "is_table: False\nis_diagram: False\n---\n"
        ),
        (
            "Attached is one page of a document that you must process. Just return the plain text "
            "representation of this document as if you were reading it naturally. Convert equations "
            "to LateX and tables to HTML."
        ),
        "| a | b |\n|---|---|\n| 1 | 2 |\n<table><tr><th>x</th><td>y</td></tr></table>\n",
        "$$ \\frac{a}{b} = \\sum_{i=0}^{n} x_i^2 $$ \\( \\alpha + \\beta \\) # Heading **bold** *it*",
        "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,;:!?()[]{}<>/\\|-_=+*&^%$#@~`'\"",
    ]
    return corpus


def build_tokenizer(spec: TinySpec, extra_texts: list[str] | None = None):
    """Train a byte-level BPE tokenizer with the Qwen special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    learned = spec.vocab_size - len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=learned,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = _training_corpus(extra_texts)
    random.Random(spec.seed).shuffle(corpus)
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
        model_max_length=32768,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_budget(arch: Architecture) -> ImageBudget:
    """The tiny model's image budget: the architecture's patches, :data:`TINY_MAX_TOKENS` tokens at most."""
    unit = arch.image_budget.factor**2
    return ImageBudget(arch.image_budget.patch_size, arch.image_budget.merge_size,
                       TINY_MIN_TOKENS * unit, TINY_MAX_TOKENS * unit)


def build_processor(tokenizer, arch: Architecture | None = None, image_mean: float | None = None):
    """The image-only processor of ``arch`` around ``tokenizer`` with the PIL image processor.

    ``image_mean`` replaces the architecture's per-channel mean (CLIP's, ~0.48) by one value for the
    three channels: 1.0 makes white pixels 0, so the blank page adds nothing to the patch embeddings.
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    arch = arch or ARCHITECTURES[DEFAULT_ARCHITECTURE]
    budget = tiny_budget(arch)
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=budget.min_pixels, max_pixels=budget.max_pixels, patch_size=budget.patch_size,
        merge_size=budget.merge_size,
        image_mean=list(arch.image_mean) if image_mean is None else [image_mean] * 3, image_std=list(arch.image_std),
    )
    return image_only_processor_class(arch)(image_processor=image_processor, tokenizer=tokenizer,
                                            chat_template=CHAT_TEMPLATE)


def _mrope_section(head_dim: int, arch: Architecture) -> list[int]:
    """Temporal, height, width rotary sections summing to ``head_dim / 2``, in the real models'
    proportions: Qwen2.5-VL-7B's 16, 24, 24 of 64 (8, 12, 12 for heads of 64); Qwen3-VL-8B's
    24, 20, 20 of 64 (12, 10, 10)."""
    half = head_dim // 2
    if arch.key.startswith("qwen3"):
        spatial = (half - half * 3 // 8) // 2
    else:
        spatial = (half - half // 4) // 2
    return [half - 2 * spatial, spatial, spatial]


def build_model_config(spec: TinySpec, tokenizer):
    """A config of ``spec.architecture`` of the tiny shape whose token ids agree with ``tokenizer``."""
    import transformers

    arch = ARCHITECTURES[spec.architecture]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    qwen3 = arch.key.startswith("qwen3")
    # Qwen3 text models carry their head size explicitly: heads of TEXT_HEAD_DIM at any hidden size.
    head_dim = TEXT_HEAD_DIM if qwen3 else spec.hidden_size // spec.num_heads
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.hidden_size * 2,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": max(1, spec.num_heads // 2),
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0 if qwen3 else 10000.0,
                            "mrope_section": _mrope_section(head_dim, arch)},
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": True,
    }
    common = {"patch_size": arch.image_budget.patch_size, "spatial_merge_size": arch.image_budget.merge_size,
              "temporal_patch_size": 2, "depth": spec.vision_depth, "num_heads": spec.vision_heads}
    if qwen3:
        text_config["head_dim"] = head_dim
        text_config["rope_parameters"]["mrope_interleaved"] = True
        vision_config = {**common, "hidden_size": spec.vision_hidden_size,
                         "intermediate_size": spec.vision_hidden_size * 2, "out_hidden_size": spec.hidden_size,
                         # an 8 x 8 grid, interpolated to each page's patch grid
                         "num_position_embeddings": 64,
                         "deepstack_visual_indexes": [0]}
    elif arch.key == "qwen2_vl":
        vision_config = {**common, "embed_dim": spec.vision_hidden_size, "hidden_size": spec.hidden_size,
                         "mlp_ratio": 2}
    else:
        vision_config = {**common, "hidden_size": spec.vision_hidden_size,
                         "intermediate_size": spec.vision_hidden_size * 2, "out_hidden_size": spec.hidden_size,
                         "fullatt_block_indexes": [spec.vision_depth - 1], "window_size": 112}
    if arch.moe:
        # 3/4 of hidden_size: neither it nor twice it equals hidden_size (non-square experts)
        # norm_topk_prob: the published config's field, which vLLM 0.31 reads (transformers 5.24's
        # router always normalises the top-k weights and does not declare it)
        text_config.update(num_experts=TINY_EXPERTS, num_experts_per_tok=TINY_EXPERTS_PER_TOKEN,
                           moe_intermediate_size=spec.hidden_size * 3 // 4, decoder_sparse_step=1,
                           norm_topk_prob=True)
    config_class = getattr(transformers, arch.model_class.replace("ForConditionalGeneration", "Config"))
    return config_class(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def text_heads(hidden_size: int) -> int:
    """Attention heads of the text model: heads of :data:`TEXT_HEAD_DIM` where ``hidden_size`` allows.

    ``hidden_size`` 64 gives one head of 64, 128 two; a size that is no multiple of 64 (e.g. 32 in
    tests) gets one head of its own size, which transformers runs but vLLM's CPU attention may not.
    """
    return max(1, hidden_size // TEXT_HEAD_DIM) if hidden_size % TEXT_HEAD_DIM == 0 else 1


def build_tiny_model(
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 1024,
    architecture: str = DEFAULT_ARCHITECTURE,
    image_mean: float | None = None,
    num_heads: int | None = None,
) -> Path:
    """Build the embedded tiny model of ``architecture`` and save model, tokenizer and processor to ``out_dir``.

    Deterministic for a given seed, shape and architecture: the same arguments give the same weights.
    ``image_mean`` is the processor's pixel mean (:func:`build_processor`);
    ``num_heads`` the text model's attention heads (None: :func:`text_heads`; Qwen2-family heads are
    ``hidden_size / num_heads`` wide, Qwen3's :data:`TEXT_HEAD_DIM`).
    """
    import torch
    import transformers
    from transformers import GenerationConfig

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {architecture!r}")
    arch = ARCHITECTURES[architecture]
    spec = TinySpec(seed=seed, hidden_size=hidden_size, num_layers=num_layers, vocab_size=vocab_size,
                    num_heads=num_heads or text_heads(hidden_size), architecture=architecture, image_mean=image_mean)
    if hidden_size % 8:
        raise ValueError(f"hidden_size must be a multiple of 8, got {hidden_size}")
    if hidden_size % spec.num_heads or (hidden_size // spec.num_heads) % 8:
        raise ValueError(f"num_heads {spec.num_heads} must split hidden_size {hidden_size} into heads of a multiple "
                         f"of 8")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    processor = build_processor(tokenizer, arch, image_mean)
    config = build_model_config(spec, tokenizer)
    torch.manual_seed(spec.seed)
    model = getattr(transformers, arch.model_class)(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id,
        pad_token_id=config.text_config.pad_token_id,
        bos_token_id=config.text_config.bos_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    publish_expert_layout(out)  # Qwen3-VL-MoE: experts as published checkpoints store them
    processor.save_pretrained(out)
    (out / TINY_SPEC_NAME).write_text(json.dumps(asdict(spec), indent=2) + "\n", encoding="utf-8")
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("built tiny %s (%d parameters) in %s", arch.label, n_params, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="olmpipe build-model", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the Hugging Face model into")
    parser.add_argument("--seed", type=int, default=TinySpec.seed)
    parser.add_argument("--hidden-size", type=int, default=TinySpec.hidden_size)
    parser.add_argument("--num-layers", type=int, default=TinySpec.num_layers)
    parser.add_argument("--vocab-size", type=int, default=TinySpec.vocab_size)
    parser.add_argument("--architecture", choices=sorted(ARCHITECTURES), default=DEFAULT_ARCHITECTURE)
    parser.add_argument("--num-heads", type=int, default=None, help="text attention heads (default: heads of 64)")
    parser.add_argument("--image-mean", type=float, default=None,
                        help="pixel mean of the processor for all three channels (default: the architecture's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    build_tiny_model(args.out_dir, seed=args.seed, hidden_size=args.hidden_size,
                     num_layers=args.num_layers, vocab_size=args.vocab_size, architecture=args.architecture,
                     image_mean=args.image_mean,
                     num_heads=args.num_heads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
