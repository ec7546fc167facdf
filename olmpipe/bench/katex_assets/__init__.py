"""KaTeX 0.16.21 release files (MIT, see LICENSE), as published on npm (``npm pack katex@0.16.21``).

Only ``dist/katex.min.js`` and ``dist/katex.min.css`` are shipped, byte for byte; KaTeX's fonts are
deliberately left out: the reference benchmark never loads them (see ``olmpipe.bench.katex``), so
its layout check measures the system's fallback font, and so must ours.
"""
