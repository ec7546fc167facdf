"""``olmpipe synth``: build a synthetic olmOCR-Bench folder from HTML pages, stage by stage or at once.

    olmpipe synth build                      # html -> render -> tests into results/synth/
    olmpipe synth html   --out results/synth/html
    olmpipe synth render --html results/synth/html --out results/synth/render
    olmpipe synth tests  --html results/synth/html --render results/synth/render \\
        --out results/synth/bench --report results/synth/report.json

Settings come from the ``synth`` section of ``--config`` (default ``config/config.yaml``) and its
``rasterize.longest_side`` (text the model cannot read at that resolution is not mined); see
``docs/synth.md``. Exit codes: 0 done, 1 the stage failed (the message says why), 2 bad config.
"""

from __future__ import annotations

import argparse
import logging

from olmpipe.layout import SYNTH_DIR, SynthLayout

log = logging.getLogger("olmpipe.synth")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="olmpipe synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="config YAML (default: config/config.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    paths = SynthLayout()
    html = sub.add_parser("html", help="collect (or ask a VLM for) the HTML pages")
    html.add_argument("--out", default=paths.html)
    render = sub.add_parser("render", help="print the HTML pages to one-page PDFs in headless Chromium")
    render.add_argument("--html", default=paths.html)
    render.add_argument("--out", default=paths.render)
    tests = sub.add_parser("tests", help="mine and check tests; write the bench folder and report")
    tests.add_argument("--html", default=paths.html)
    tests.add_argument("--render", default=paths.render)
    tests.add_argument("--out", default=paths.bench)
    tests.add_argument("--report", default=paths.report)
    build = sub.add_parser("build", help="all three stages into --out-root")
    build.add_argument("--out-root", default=str(SYNTH_DIR))
    return parser


def main(argv: list[str] | None = None) -> int:
    from olmpipe.bench.mathbrowser import BrowserError
    from olmpipe.config import ConfigError, load_config
    from olmpipe.synth.bench import build_bench, render_pages
    from olmpipe.synth.source import collect_html

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    # the pages are mined for the raster the model reads them in (text it cannot read there is not mined)
    synth, longest_side = cfg["synth"], cfg["rasterize"]["longest_side"]
    try:
        if args.command == "html":
            collect_html(synth, args.out)
        elif args.command == "render":
            render_pages(args.html, args.out, synth, longest_side=longest_side)
        elif args.command == "tests":
            build_bench(args.html, args.render, args.out, args.report, synth)
        else:
            root = SynthLayout(args.out_root)
            collect_html(synth, root.html)
            render_pages(root.html, root.render, synth, longest_side=longest_side)
            build_bench(root.html, root.render, root.bench, root.report, synth)
    except (OSError, ValueError, RuntimeError, BrowserError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
