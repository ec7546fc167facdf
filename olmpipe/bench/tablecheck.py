"""The ``table`` test with olmocr 0.4.27's semantics, on the tables :mod:`olmpipe.bench.tables`
parsed once per page: a cell matching the expected text (fuzzy, ``max_diffs``) whose neighbours
(``up``/``down``/``left``/``right``) and headings (``top_heading``/``left_heading``) match too.
Each test's outcome on a parsed table is remembered (:attr:`~olmpipe.bench.tables.TableData.outcomes`).
"""

from __future__ import annotations

from rapidfuzz import fuzz, process

from olmpipe.bench.tables import TableData, TableTooLarge, normalize_cell


def _threshold(expected: str, max_diffs: int) -> float:
    return max(0.5, 1.0 - (max_diffs / (len(expected) if len(expected) > 0 else 1)))


def _best_heading(expected: str, candidates, threshold: float, best: tuple[float, str]):
    """Scan heading candidates like the reference: keep the best, stop at the first above threshold."""
    best_sim, best_match = best
    for header_text in candidates:
        header_text = normalize_cell(header_text)
        sim = fuzz.ratio(expected, header_text) / 100.0
        if sim > best_sim:
            best_sim, best_match = sim, header_text
            if best_sim >= threshold:
                return (best_sim, best_match), True
    return (best_sim, best_match), False


def _check_heading(kind: str, expected: str, table: TableData, r: int, c: int, max_diffs: int) -> str | None:
    """None if the top/left heading of cell (r, c) matches ``expected``, else the reason."""
    threshold = _threshold(expected, max_diffs)
    cells = table.rows
    if kind == "top":
        # candidates are generated lazily: the scan often stops early, and tables can be large
        mapped = [h for _, h in table.col_headers.get(c, [])] if c in table.col_headers else []
        fallback = (cells[i][c] for i in sorted(table.header_rows) if i < r and cells[i][c].strip())
        last_resort = (cells[i][c] for i in range(r) if cells[i][c].strip())
    else:
        mapped = [h for _, h in table.row_headers.get(r, [])] if r in table.row_headers else []
        fallback = (cells[r][j] for j in sorted(table.header_cols) if j < c and cells[r][j].strip())
        last_resort = (cells[r][j] for j in range(c) if cells[r][j].strip())
    best, found = _best_heading(expected, mapped, threshold, (0, ""))
    if not found and (table.header_rows if kind == "top" else table.header_cols):
        best, found = _best_heading(expected, fallback, threshold, best)
    if not found and not best[1]:
        best, _ = _best_heading(expected, last_resort, 2.0, best)  # never stops early
    sim, match = best
    label = "Top" if kind == "top" else "Left"
    if not match:
        return f"No {label.lower()} heading found for cell at ({r}, {c})"
    if sim < threshold:
        return f"{label} heading '{match}' doesn't match expected '{expected}' (similarity: {sim:.2f})"
    return None


def _matching_cells(target: str, table: TableData, threshold: float) -> list[tuple[int, int]]:
    """Cells whose normalized text has ``fuzz.ratio(target, cell) / 100 >= threshold``, row-major.

    rapidfuzz's ``process.extract`` prefilters in C with a cutoff just below the threshold; the
    exact test is then applied to the few candidates it returns.
    """
    flat = table.flat_normalized
    if not flat:
        return []
    cutoff = max(0.0, threshold * 100.0 - 1e-6)
    found = process.extract(target, flat, scorer=fuzz.ratio, score_cutoff=cutoff, limit=None)
    n_cols = table.n_cols
    return [divmod(k, n_cols) for k in sorted(k for _, score, k in found if score / 100.0 >= threshold)]


_NEIGHBOURS = (("up", -1, 0, "Cell above"), ("down", 1, 0, "Cell below"),
               ("left", 0, -1, "Cell to the left"), ("right", 0, 1, "Cell to the right"))


_REASONS_KEPT = 5  # reasons quoted in a failed table verdict
_TEST_FIELDS = ("cell", "up", "down", "left", "right", "top_heading", "left_heading")


def _table_outcome(norm: dict, max_diffs: int, table: TableData) -> tuple[bool, list[str]]:
    """(passed, reasons of every matching cell that failed) of one table test on one table."""
    target = norm["cell"]
    ncells = table.normalized
    failed: list[str] = []
    for r, c in _matching_cells(target, table, _threshold(target, max_diffs)):
        reasons: list[str] = []
        for name, dr, dc, label in _NEIGHBOURS:
            expected = norm[name]
            rr, cc = r + dr, c + dc
            if not expected or not (0 <= rr < table.n_rows and 0 <= cc < table.n_cols):
                continue
            sim = fuzz.ratio(expected, ncells[rr][cc]) / 100.0
            if sim < _threshold(expected, max_diffs):
                reasons.append(f"{label} '{ncells[rr][cc]}' doesn't match expected '{expected}' "
                               f"(similarity: {sim:.2f})")
        for kind, name in (("top", "top_heading"), ("left", "left_heading")):
            if norm[name]:
                reason = _check_heading(kind, norm[name], table, r, c, max_diffs)
                if reason:
                    reasons.append(reason)
        if not reasons:
            return True, []
        if len(failed) < _REASONS_KEPT:  # the verdict quotes the first few; a table can match 10^6 cells
            failed.extend(reasons[: _REASONS_KEPT - len(failed)])
    return False, failed


def check_table(test, page) -> tuple[bool, str]:
    """Verdict of a ``table`` test on a :class:`~olmpipe.bench.pagetext.PageText`.

    The reference scans the tables in order and passes at the first matching cell whose
    neighbours and headings match; each table's part of that scan is a pure function of the table
    and the test, remembered on the table (shared by the completions that repeat it).
    """
    norm = test._norm
    target = norm["cell"]
    threshold = _threshold(target, test.max_diffs)
    try:
        tables = [] if test.ignore_markdown_tables else list(page.tables)
    except TableTooLarge as exc:
        return False, f"Markdown table parsing failed: {type(exc).__name__}: {exc}"
    html = page.html_tables
    if isinstance(html, Exception):
        return False, f"HTML table parsing failed: {type(html).__name__}: {html}"
    tables.extend(html)
    if not tables:
        return False, "No tables found in the content"

    key = (*(norm[name] for name in _TEST_FIELDS), test.max_diffs)
    failed: list[str] = []
    for table in tables:
        outcome = table.outcomes.get(key)
        if outcome is None:
            outcome = table.outcomes[key] = _table_outcome(norm, test.max_diffs, table)
        passed, reasons = outcome
        if passed:
            return True, ""
        failed.extend(reasons)
    if not failed:
        return False, f"No cell matching '{target}' found in any table with threshold {threshold}"
    return False, f"Found cells matching '{target}' but relationships were not satisfied: {'; '.join(failed[:_REASONS_KEPT])}"
