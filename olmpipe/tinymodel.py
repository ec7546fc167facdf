"""The embedded default model: a tiny Qwen2.5-VL with random weights and a locally trained tokenizer.

It lets a new user run the whole chain (generation, GRPO, souping, evaluation) on a laptop with no
GPU and no network before pointing the workflow at a real 7B checkpoint. The model is built from
the same classes as Qwen2.5-VL-7B, saved as an ordinary Hugging Face folder, and loaded back by
:func:`olmpipe.modelload.load_model_and_processor`, the same function that loads a real model folder.

    python -m olmpipe.tinymodel results/model/tiny --seed 0 --hidden-size 64

Facts this module works around (transformers 5.x on a CPU-only torch without torchvision):
- the stock Qwen2.5-VL processor requires a video processor, which needs torchvision; the tiny
  model is saved with the image-only processor of :mod:`olmpipe.modelload`, which takes none and
  saves itself as the stock processor, so that vLLM can load the folder (docs/vllm.md);
- the model config's image/video/vision token ids must equal the tokenizer's ids;
- the text model's ``mrope_section`` must sum to ``head_dim / 2``;
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

from olmpipe.modelload import CHAT_TEMPLATE, image_only_processor_class
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

# Image budget of the tiny model's processor: pages are resized to at most this many pixels, so a
# 1288 px page becomes ~64 vision tokens and a GRPO step stays around a second on one CPU thread.
TINY_MAX_PIXELS = 256 * 28 * 28 // 4
TINY_MIN_PIXELS = 16 * 28 * 28

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


def _training_corpus(extra_texts: list[str] | None) -> list[str]:
    """Text the tokenizer learns from: the bundled bench outputs, the prompt, markdown and YAML."""
    corpus: list[str] = list(extra_texts or [])
    root = Path(__file__).resolve().parents[1] / "data" / "bench"
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


def build_processor(tokenizer, max_pixels: int = TINY_MAX_PIXELS, min_pixels: int = TINY_MIN_PIXELS):
    """The image-only Qwen2.5-VL processor around ``tokenizer`` with the PIL image processor."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    image_processor = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels)
    return image_only_processor_class()(image_processor=image_processor, tokenizer=tokenizer,
                                        chat_template=CHAT_TEMPLATE)


def build_model_config(spec: TinySpec, tokenizer):
    """A Qwen2.5-VL config of the tiny shape whose token ids agree with ``tokenizer``."""
    from transformers import Qwen2_5_VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = spec.hidden_size // spec.num_heads
    # Temporal, height, width rotary sections summing to head_dim / 2, in Qwen2.5-VL-7B's
    # proportions (16, 24, 24 of 64): 8, 12, 12 for heads of 64.
    half = head_dim // 2
    spatial = (half - half // 4) // 2
    mrope = [half - 2 * spatial, spatial, spatial]
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.hidden_size * 2,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": max(1, spec.num_heads // 2),
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope},
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": True,
    }
    vision_config = {
        "depth": spec.vision_depth,
        "hidden_size": spec.vision_hidden_size,
        "intermediate_size": spec.vision_hidden_size * 2,
        "num_heads": spec.vision_heads,
        "out_hidden_size": spec.hidden_size,
        "fullatt_block_indexes": [spec.vision_depth - 1],
        "window_size": 112,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    return Qwen2_5_VLConfig(
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
) -> Path:
    """Build the embedded tiny Qwen2.5-VL and save model, tokenizer and processor to ``out_dir``.

    Deterministic for a given seed and shape: the same arguments give the same weights.
    """
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration

    spec = TinySpec(seed=seed, hidden_size=hidden_size, num_layers=num_layers, vocab_size=vocab_size,
                    num_heads=text_heads(hidden_size))
    if hidden_size % 8:
        raise ValueError(f"hidden_size must be a multiple of 8, got {hidden_size}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    processor = build_processor(tokenizer)
    config = build_model_config(spec, tokenizer)
    torch.manual_seed(spec.seed)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id,
        pad_token_id=config.text_config.pad_token_id,
        bos_token_id=config.text_config.bos_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / TINY_SPEC_NAME).write_text(json.dumps(asdict(spec), indent=2) + "\n", encoding="utf-8")
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("built tiny Qwen2.5-VL (%d parameters) in %s", n_params, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="olmpipe build-model", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the Hugging Face model into")
    parser.add_argument("--seed", type=int, default=TinySpec.seed)
    parser.add_argument("--hidden-size", type=int, default=TinySpec.hidden_size)
    parser.add_argument("--num-layers", type=int, default=TinySpec.num_layers)
    parser.add_argument("--vocab-size", type=int, default=TinySpec.vocab_size)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    build_tiny_model(args.out_dir, seed=args.seed, hidden_size=args.hidden_size,
                     num_layers=args.num_layers, vocab_size=args.vocab_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
