"""Synthetic training benches the olmOCR 2 way: HTML pages -> PDFs -> tests mined from the HTML.

Stages (``workflow/rules/synth.smk``, target ``snakemake --cores all synth``; ``olmpipe synth``):

- :mod:`olmpipe.synth.source` (``synth_html``): HTML files, or a VLM's rewrite of PDF pages;
- :mod:`olmpipe.synth.render` + :mod:`olmpipe.synth.bench` (``synth_render``): one-page PDFs in
  offline headless Chromium, optional rotated copies;
- :mod:`olmpipe.synth.mine` + :mod:`olmpipe.synth.bench` (``synth_tests``): tests and reference
  answers, checked, written as an olmOCR-Bench folder with ``report.json``;
- :mod:`olmpipe.synth.chain`: how the synthetic bench replaces ``bench.dir`` for training.

See ``docs/synth.md``.
"""
