"""Whether printed text can be read in the page image the model sees: size, squash, overlap, skew, blur.

Text can be painted, on the page and uncovered (:mod:`olmpipe.synth.visible` checks that) and still
be unreadable: squashed by ``transform: scaleX(0.04)`` into a grey sliver, pulled onto itself by a
negative ``letter-spacing``, sheared flat by ``skewX(75deg)``, blurred by ``filter: blur(3px)``, or
simply too small. A test about such text rewards writing what the model cannot read, so it is
treated as hidden. The model reads the page rasterized at ``rasterize.longest_side`` pixels on its
longest side (:mod:`olmpipe.rasterize`; 1288 in olmOCR 2, so a CSS pixel of a US-letter page is
1288 / 1056 = 1.22 image pixels), and the bounds on size are in those image pixels, computed from
the text's layout size and the transforms and filters above it (:data:`olmpipe.synth.pagejs.MEASURE_JS`).

The bounds were set by printing one sentence (13 px serif) under each effect and reading it in the
1288 px raster (docs/synth.md, "Only what the page image shows", has the table):

- :data:`MIN_TEXT_IMAGE_PX` and :data:`MIN_ADVANCE_IMAGE_PX`: the smallest text kept is a 4 px
  (3 pt) font on a letter page at 1288 px, whose line box is 5 CSS px (6.1 image px) high and whose
  characters advance 2.2 CSS px (2.7 image px) on average; a 3 px font (4.9 and 2 image px) is a row
  of specks. :data:`MIN_TEXT_PX` keeps the old floor of 4 CSS px whatever the resolution.
- :data:`MIN_ADVANCE_SHARE`: characters narrower than 0.15 of the text's height. A serif font
  advances about 0.48 of its line box per character, a condensed one about 0.3; ``scaleX(0.4)``
  (0.19) still reads, ``scaleX(0.25)`` (0.12) is a comb of strokes.
- :data:`MAX_OVERLAP`: negative letter spacing that pulls each character over more than 0.45 of
  its own advance. -0.2 em on a serif font (0.37) reads as run-together words; -0.3 em (0.56) is
  a smear.
- :data:`MAX_SKEW_DEG`: the text's axes sheared more than 55 degrees off square. ``skewX(50deg)``
  reads, ``skewX(65deg)`` hardly. Rotation alone keeps text readable (rotated pages are part of
  the training data) and is not bounded; a 3-D turn (``rotateY(80deg)``) squashes and is caught by
  the advance bounds.
- :data:`MAX_BLUR_SHARE`: a blur whose standard deviation exceeds 0.12 of the text's height.
  ``blur(1.5px)`` on a 15 px line (0.10) reads, ``blur(2px)`` (0.13) barely, ``blur(3px)`` not.

Contrast is bounded where ink is measured (:data:`olmpipe.synth.visible.INK_LEVEL`): text whose
strongest pixels differ from what is behind it by at most 40 of 255 grey levels (``#d8d8d8`` on
white, a contrast ratio of about 1.45:1) is hidden.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

#: Line boxes lower than this, across the text's baseline, in image pixels of the training raster.
MIN_TEXT_IMAGE_PX = 6.0
#: Line boxes lower than this in CSS px (about a 3 pt font), whatever the raster's resolution.
MIN_TEXT_PX = 4.0
#: Characters advancing less than this on average along the baseline, in image pixels.
MIN_ADVANCE_IMAGE_PX = 2.5
#: Characters advancing less than this share of the text's height (squashed along the baseline).
MIN_ADVANCE_SHARE = 0.15
#: Negative letter spacing pulling each character over more than this share of its own advance.
MAX_OVERLAP = 0.45
#: Text whose axes are sheared more than this many degrees off square.
MAX_SKEW_DEG = 55.0
#: A filter blur whose standard deviation is more than this share of the text's height.
MAX_BLUR_SHARE = 0.12


@dataclass(frozen=True)
class Drawing:
    """How an element draws its text (one row of :data:`~olmpipe.synth.pagejs.MEASURE_JS`'s
    ``drawings``): the linear part ``[a, b, c, d]`` of its transforms (``x' = a x + c y``,
    ``y' = b x + d y``), its letter spacing (layout px), the blur of the filters above it (page
    px), whether a filter draws it, and whether its lines run vertically."""

    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    d: float = 1.0
    spacing: float = 0.0
    blur: float = 0.0
    filtered: bool = False
    vertical: bool = False

    @classmethod
    def from_row(cls, row: Sequence[float]) -> Drawing:
        a, b, c, d, spacing, blur, filtered, vertical = row
        return cls(a, b, c, d, spacing, blur, bool(filtered), bool(vertical))

    @property
    def transformed(self) -> bool:
        return (self.a, self.b, self.c, self.d) != (1.0, 0.0, 0.0, 1.0)

    def axes(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """Where the transforms take a unit step along the baseline and one across it."""
        x_axis, y_axis = (self.a, self.b), (self.c, self.d)
        return (y_axis, x_axis) if self.vertical else (x_axis, y_axis)

    def skew_deg(self) -> float:
        """How far the transformed axes are from square, in degrees (0: rotated or scaled only)."""
        (ix, iy), (bx, by) = self.axes()
        norm = math.hypot(ix, iy) * math.hypot(bx, by)
        if norm == 0:
            return 90.0
        return abs(90.0 - math.degrees(math.acos(max(-1.0, min(1.0, (ix * bx + iy * by) / norm)))))

    def along(self) -> float:
        """Page px per layout px along the baseline."""
        return math.hypot(*self.axes()[0])

    def across(self) -> float:
        """Page px per layout px across the baseline (perpendicular to it: a shear leaves it alone)."""
        along = self.along()
        return abs(self.a * self.d - self.b * self.c) / along if along else 0.0


def advance_chars(text: str) -> int:
    """Characters of ``text`` that advance the pen: combining marks and format characters do not."""
    return sum(unicodedata.category(ch) not in ("Mn", "Me", "Cf") for ch in text)


def local_extent(rects: Sequence[Sequence[float]], vertical: bool) -> tuple[float, float]:
    """(length along the baseline, height across it) of a word's layout boxes ``[x, y, w, h]``."""
    if vertical:
        return sum(r[3] for r in rects), max((r[2] for r in rects), default=0.0)
    return sum(r[2] for r in rects), max((r[3] for r in rects), default=0.0)


def _size_skew_blur(drawing: Drawing, height: float, image_scale: float, shrink: float) -> str | None:
    """The bounds every printed word is held to; ``height`` in CSS px of the paper, across the baseline."""
    if height * image_scale < MIN_TEXT_IMAGE_PX or height < MIN_TEXT_PX:
        return "too small"
    if drawing.skew_deg() > MAX_SKEW_DEG:
        return "skewed"
    if drawing.blur / shrink > MAX_BLUR_SHARE * height:
        return "blurred"
    return None


def illegible(drawing: Drawing, height: float, advance: float, *, image_scale: float,
              shrink: float = 1.0) -> str | None:
    """Why text drawn so cannot be read in the training raster, or None when it can.

    ``height`` is its line box across the baseline and ``advance`` its mean advance per character,
    both in layout px before transforms; ``image_scale`` is the raster's pixels per CSS px of the
    paper, ``shrink`` how much Chromium's print shrinks the layout onto the paper.

    >>> illegible(Drawing(a=0.04), 15, 7.2, image_scale=1.22)   # transform: scaleX(0.04)
    'too narrow'
    >>> illegible(Drawing(), 15, 7.2, image_scale=1.22) is None
    True
    """
    across = height * drawing.across() / shrink  # CSS px of the paper
    reason = _size_skew_blur(drawing, across, image_scale, shrink)
    if reason:
        return reason
    if drawing.spacing < 0:
        natural = advance - drawing.spacing  # Chromium adds the spacing after every character
        if natural <= 0 or -drawing.spacing > MAX_OVERLAP * natural:
            return "overlapping"
    along = advance * drawing.along() / shrink
    if along * image_scale < MIN_ADVANCE_IMAGE_PX:
        return "too narrow"
    if along < MIN_ADVANCE_SHARE * across:
        return "squashed"
    return None


def illegible_formula(drawing: Drawing, height: float, *, image_scale: float, shrink: float = 1.0) -> str | None:
    """:func:`illegible` for a typeset formula: ``height`` is its boxes' height as printed (CSS px of
    the paper, transforms included); it has no advance per character, so only its size, skew and
    blur are bounded."""
    return _size_skew_blur(drawing, height, image_scale, shrink)
