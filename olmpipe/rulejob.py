"""What every file-to-file job of the workflow does with its log: everything it logs, and any error
that ends it, goes to the log file Snakemake names when the job fails.

Snakemake runs such a rule (``python -m olmpipe.rulejobs``, through a ``shell:`` command) as a child
process whose standard error is Snakemake's own, and on failure points the user to the rule's
``log:`` file. A job that only routes ``logging`` there leaves that file empty when it ends in an
exception: the refusal (e.g. ``download_model``'s damaged blob in the Hugging Face cache) and its
traceback went to Snakemake's terminal only. Each job of :mod:`olmpipe.rulejobs` therefore runs
inside :func:`rule_job`::

    with rule_job(log, "download_model"):
        download(repo, revision, out)

An exception is logged with its traceback, then the job exits with one line naming the rule, the
error and the log (on Snakemake's standard error); a ``SystemExit`` with a message (a job's own
refusal) is logged and kept. The generation and training rules send their output to the log with
``> {log} 2>&1``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

__all__ = ["rule_job"]


@contextlib.contextmanager
def rule_job(log: str | Path, rule: str) -> Iterator[logging.Logger]:
    """Route logging to ``log`` (the rule's log file) for the job of ``rule``, and send any error
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
