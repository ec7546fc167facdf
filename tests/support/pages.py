"""A real page rendered as olmpipe.rasterize renders it, and the image tokens a real Qwen VL processor
gives it: what the image-token arithmetic of olmpipe.models.architectures and olmpipe.plan.memory is checked against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: A US-letter page (612 x 792 pt) of the bundled bench.
LETTER_PDF = REPO / "data" / "bench" / "olmocr-sample" / "pdfs" / "earnings.pdf"


def letter_page(longest_side: int = 1288) -> Any:
    """The first page of :data:`LETTER_PDF` as a PIL image of ``longest_side`` px (1288 -> 996 x 1288)."""
    import pypdfium2 as pdfium

    from olmpipe.rasterize import render_page

    doc = pdfium.PdfDocument(LETTER_PDF)
    try:
        return render_page(doc[0], longest_side)
    finally:
        doc.close()


def processor_image_tokens(arch_key: str, budget: Any, image: Any) -> int:
    """``<|image_pad|>`` tokens that the real processor class of ``arch_key`` (transformers'
    Qwen2VLImageProcessorPil set to ``budget``: patch, merge, pixel limits) puts in a one-image prompt."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from olmpipe.models.architectures import ARCHITECTURES
    from olmpipe.models.load import CHAT_TEMPLATE, image_only_processor_class
    from olmpipe.models.tiny import TinySpec, build_tokenizer

    arch = ARCHITECTURES[arch_key]
    image_processor = Qwen2VLImageProcessorPil(patch_size=budget.patch_size, merge_size=budget.merge_size,
                                               min_pixels=budget.min_pixels, max_pixels=budget.max_pixels,
                                               image_mean=list(arch.image_mean), image_std=list(arch.image_std))
    tokenizer = build_tokenizer(TinySpec())
    processor = image_only_processor_class(arch)(image_processor=image_processor, tokenizer=tokenizer,
                                                 chat_template=CHAT_TEMPLATE)
    prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Read.<|im_end|>\n"
    ids = processor(text=[prompt], images=[image], return_tensors="pt")["input_ids"][0].tolist()
    return ids.count(tokenizer.convert_tokens_to_ids("<|image_pad|>"))
