"""Page skeleton and style of the HTML report (:mod:`olmpipe.report.page` fills the ``{fields}``).

Kept apart from the report's logic so the layout can be read and changed on its own. The
template is filled with ``str.format``: every value is escaped HTML built by the report, and the
CSS is passed as a value so its braces need no escaping.
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1250px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
.headline { font-size: 1.15em; background: #f3f6fa; border-left: 4px solid #1f77b4; padding: 0.6em 1em; }
.muted { color: #777; font-size: 0.9em; margin: 0.2em 0; }
.warnbox { background: #fff4e5; border-left: 4px solid #e67e22; padding: 0.4em 1em; }
.warn { color: #b35900; font-weight: 600; margin: 0.2em 0; }
.ok { color: #1e7b1e; }
.bad { color: #c0392b; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
tr.overall td { font-weight: 700; background: #f3f6fa; }
td.pos { color: #1e7b1e; font-weight: 600; }
td.neg { color: #c0392b; font-weight: 600; }
table.kv th { width: 22em; }
figure { display: inline-block; margin: 0.5em 1em 1em 0; max-width: 100%; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; max-width: 700px; }
section.page { border: 1px solid #ddd; border-radius: 6px; padding: 0.3em 1em 0.8em; margin: 1em 0; }
section.page h3 { margin: 0.4em 0; font-size: 1.05em; }
.cols { display: grid; grid-template-columns: minmax(200px, 1fr) 1fr 1fr; gap: 1em; }
.cols h4 { margin: 0.2em 0; }
.cols img { max-width: 100%; border: 1px solid #ccc; }
pre { white-space: pre-wrap; word-break: break-word; background: #fafafa; border: 1px solid #eee;
      padding: 0.5em; max-height: 28em; overflow: auto; font-size: 0.82em; margin: 0; }
table.tests { width: 100%; }
table.tests td:first-child { word-break: break-all; max-width: 16em; }
table.tests td:nth-child(3) { word-break: break-word; max-width: 24em; }
.cols > div { min-width: 0; }
"""

PAGE_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>olmpipe report: {title}</title>
<style>{css}</style>
</head>
<body>
<h1>olmpipe report: {title}</h1>
<p class="muted">generated {generated} by olmpipe; everything on this page is embedded
(no external files).</p>
<p class="headline">{headline}</p>
{warnings}
{chain}
<h2>Scores</h2>
<p class="muted">olmOCR-Bench aggregation: a test passes when most of its repeats pass; a category
(JSONL file) scores the share of its tests passed; overall is the mean over categories; a test type
scores the mean of its tests' pass rates over repeats. Intervals: paired bootstrap (within categories for overall). p: paired
sign-flip test on per-test outcomes (exact when few tests changed). Gained / lost: tests whose majority
verdict went fail &rarr; pass / pass &rarr; fail.</p>
{scores}
<h2>Plots</h2>
{figures}
<h2>Reward-hacking guards</h2>
{guards}
<h2>Generation: rotation retries and fallback pages</h2>
<p class="muted">olmOCR's pipeline-compatible mode (generation.pipeline): an answer asking for a
rotation re-renders the page rotated and retries; a page with no usable answer falls back (scored
with the fallback text, empty as olmOCR-Bench's runner does). Counts per generation (page and repeat).</p>
{generation}
<h2>Difficulty filter and zero-spread groups</h2>
<p class="muted">GRPO learns only from groups whose completions score differently; a group whose
completions all get the same reward (TRL's <code>frac_reward_zero_std</code>) has zero advantages and
teaches nothing. The difficulty stage samples each train page before training and, with
<code>train.difficulty.enabled</code>, trains only on pages whose rewards spread (docs/difficulty.md).</p>
{difficulty}
<h2>Sample pages</h2>
<p class="muted">Largest gains first, then largest losses. Each test's verdict is the majority over repeats
(passes / repeats).</p>
{samples}
<h2>Run</h2>
<h3>Runs compared</h3>
<pre>{runs}</pre>
<h3>Statistics settings</h3>
<pre>{stats}</pre>
<h3>Configuration</h3>
<pre>{config}</pre>
<h3>Software versions</h3>
<table class="kv">{versions}</table>
</body>
</html>
"""
