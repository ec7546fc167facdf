"""What every ``script:`` job of the workflow does with its log: everything it logs, and any error
that ends it, goes to the log file Snakemake names when the job fails.

Snakemake runs a ``script:`` rule as a child process whose standard error is Snakemake's own, and
on failure points the user to the rule's ``log:`` file. A script that only routes ``logging`` there
leaves that file empty when it ends in an exception: the refusal (e.g. ``download_model``'s damaged
blob in the Hugging Face cache) and its traceback went to Snakemake's terminal only. Each script in
``workflow/scripts/`` therefore runs inside :func:`rule_job`::

    with rule_job(snakemake.log[0], "download_model"):
        download(snakemake.params.repo, snakemake.params.revision, snakemake.output.model)

An exception is logged with its traceback, then the job exits with one line naming the rule, the
error and the log (on Snakemake's standard error); a ``SystemExit`` with a message (a script's own
refusal) is logged and kept. ``shell:`` rules send their output to the log with ``> {log} 2>&1``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

__all__ = ["rule_job"]


@contextlib.contextmanager
def rule_job(log: str | Path, rule: str) -> Iterator[logging.Logger]:
    """Route logging to ``log`` (``snakemake.log[0]``) for the job of ``rule``, and send any error
    that ends the job there too (see the module docstring); yields the rule's logger."""
    logging.basicConfig(filename=str(log), level=logging.INFO, force=True)
    logger = logging.getLogger(f"olmpipe.rule.{rule}")
    try:
        yield logger
    except SystemExit as exc:
        if isinstance(exc.code, str):
            logger.error("%s", exc.code)
        elif exc.code not in (None, 0):
            logger.error("%s: exit code %s", rule, exc.code)
        raise
    except KeyboardInterrupt:
        logger.error("%s: interrupted", rule)
        raise
    except Exception as exc:
        logger.exception("%s: %s", rule, type(exc).__name__)  # the traceback ends with the message
        raise SystemExit(f"{rule}: {exc}\n(the traceback is in {log})") from None
    finally:
        logging.shutdown()
