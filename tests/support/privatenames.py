"""Find uses of TRL/transformers/accelerate/vLLM/PEFT/DeepSpeed internals outside ``olmpipe/compat/``.

An AST scan (not a grep: names in docstrings and comments do not count, ``getattr(x, "_y")`` does)
of the product code, ``olmpipe/``, ``scripts/``, ``workflow/`` and ``benchmarks/``, minus
``olmpipe/compat/``. It reports, as ``path:line: what``:

- an import of a private upstream name or module (``from trl.x import _y``, ``import a._b``), or of
  an upstream module known to be internal (:data:`INTERNAL_MODULES`);
- ``obj._name`` (or ``getattr``/``setattr``/``hasattr`` with ``"_name"``) where ``_name`` is not a
  private name olmpipe defines itself (a function, class, module or class variable, or an attribute
  set on ``self`` in a class of its own);
- in a class derived from an upstream class: defining, setting or reading (on ``self`` or
  ``super()``) a private name that the upstream classes of its ancestry have (an override of
  ``_get_train_sampler``, a read of ``self._logs``);
- an attribute known to be an upstream internal without an underscore (:data:`INTERNAL_ATTRIBUTES`:
  vLLM's engine internals, TRL's generation object);
- a private parameter (``_internal_call``) of a method in a class derived from upstream, or a
  private keyword argument that no function of olmpipe's own takes.

Known blind spot: ``obj._name`` passes when olmpipe also defines a ``_name`` of its own somewhere
(the scan does not know types); a private upstream name reached through ``self`` of a class of
olmpipe's own that only holds an upstream object is ``obj._name`` too, and caught.

Upstream ancestry is read from the syntax trees for olmpipe's own classes and found by importing the
upstream bases, so the scan needs the environment's packages; an upstream base that does not import
is reported too.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

UPSTREAM = ("trl", "transformers", "accelerate", "vllm", "peft", "deepspeed")
#: Upstream modules without an underscore that are internal (not exported, no documented API).
INTERNAL_MODULES = ("trl.trainer.utils", "trl.generation", "trl.distributed", "vllm.model_executor", "vllm.v1")
#: Upstream attributes without an underscore that are internal.
INTERNAL_ATTRIBUTES = frozenset({
    "llm_engine", "model_executor", "driver_worker", "model_runner",  # vLLM's engine behind LLM
    "reset_encoder_cache", "dispatch_cpu_unquantized_gemm", "cpu_linear",  # vLLM internals
    "vllm_generation", "sync_weights",  # TRL's generation object of GRPOTrainer
})
SCANNED = ("olmpipe", "scripts", "workflow", "benchmarks")
EXEMPT = "olmpipe/compat/"
_ATTR_FUNCS = ("getattr", "setattr", "hasattr", "delattr")
_SELF_SET = re.compile(r"self\.(_[A-Za-z]\w*)\s*(?::[^=\n]+)?=(?!=)")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _files(root: Path) -> Iterator[tuple[str, ast.Module]]:
    """(relative path, syntax tree) of every scanned file, ``olmpipe/compat/`` included."""
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            rel = path.relative_to(root).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel)


def _module_name(rel: str) -> str | None:
    """``olmpipe/train/trainer.py`` -> ``olmpipe.train.trainer`` (None outside the package)."""
    if not rel.startswith("olmpipe/"):
        return None
    parts = rel[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin of every import in a module."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


@functools.cache
def _upstream_class(dotted: str) -> type | None:
    """The upstream class ``dotted`` names (imported), or None when it does not import."""
    module, _, attr = dotted.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) else None


@functools.cache
def _upstream_privates(cls: type) -> frozenset[str]:
    """Private names the upstream classes of ``cls``'s ancestry have (class attributes and the
    ``self._x = ...`` attributes their source sets)."""
    out: set[str] = set()
    for klass in inspect.getmro(cls):
        if klass.__module__.split(".")[0] not in UPSTREAM:
            continue
        out.update(n for n in vars(klass) if _private(n))
        try:
            out.update(_SELF_SET.findall(inspect.getsource(klass)))
        except (OSError, TypeError):
            pass
    return frozenset(out)


class _Index:
    """The classes of every scanned module, and what each inherits from upstream (resolved from the
    syntax trees for olmpipe's own classes, by import for upstream ones)."""

    def __init__(self, files: list[tuple[str, ast.Module]]):
        self.classes: dict[str, dict[str, ast.ClassDef]] = {}
        self.imports: dict[str, dict[str, str]] = {}
        for rel, tree in files:
            name = _module_name(rel) or rel
            self.classes[name] = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
            self.imports[name] = _imports(tree)
        self.cache: dict[tuple[str, str], frozenset[str] | None] = {}
        self.unresolved: dict[str, list[tuple[int, str]]] = {}

    def upstream(self, module: str, name: str) -> frozenset[str] | None:
        """Private names class ``name`` of ``module`` inherits from upstream; None: no upstream ancestor."""
        key = (module, name)
        if key not in self.cache:
            self.cache[key] = None
            found: set[str] | None = None
            cls = self.classes[module][name]
            for base in cls.bases:
                inherited = self._base(module, _dotted(base), cls.lineno)
                if inherited is not None:
                    found = (found or set()) | inherited
            self.cache[key] = None if found is None else frozenset(found)
        return self.cache[key]

    def _base(self, module: str, dotted: str | None, line: int) -> frozenset[str] | None:
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.classes[module] and not rest:
            return self.upstream(module, head)
        origin = self.imports[module].get(head)
        if origin is None:
            return None
        full = f"{origin}.{rest}" if rest else origin
        owner, _, attr = full.rpartition(".")
        if owner in self.classes and attr in self.classes[owner]:  # an olmpipe class: from its syntax tree
            return self.upstream(owner, attr)
        if full.split(".")[0] not in UPSTREAM:
            return None
        cls = _upstream_class(full)
        if cls is None:
            self.unresolved.setdefault(module, []).append((line, full))
            return frozenset()
        return _upstream_privates(cls)


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    args = node.args
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]


def _own_names(files: list[tuple[str, ast.Module]], index: _Index) -> tuple[set[str], set[str]]:
    """Private names olmpipe defines -- functions, classes, module and class variables, attributes set
    on ``self`` in classes that derive from nothing upstream -- and the private parameters of its
    functions (outside classes derived from upstream). ``olmpipe/compat/`` does not count."""
    own: set[str] = set()
    params: set[str] = set()
    for rel, tree in files:
        if rel.startswith(EXEMPT):
            continue
        module = _module_name(rel) or rel
        derived = {id(n) for name, cls in index.classes[module].items() if index.upstream(module, name) is not None
                   for n in ast.walk(cls)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in derived:
                params.update(a.arg for a in _params(node) if _private(a.arg))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
                own.add(node.id)
            elif isinstance(node, ast.alias) and _private(node.asname or ""):
                own.add(node.asname)
            elif id(node) in derived:
                continue
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                own.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("_set", "__setattr__") and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                own.add(node.args[0].value)  # frozen dataclasses set their private fields this way
    return own, params


def _attribute_uses(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.expr, str]]:
    """(node, object expression, attribute name) of ``obj.name`` and ``getattr(obj, "name")``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node, node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            yield node, node.args[0], node.args[1].value


def _is_self_or_super(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return expr.id in ("self", "cls")
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"


def private_upstream_uses(root: str | Path) -> list[str]:
    """Every private or internal upstream name used outside ``olmpipe/compat/`` under ``root``."""
    files = list(_files(Path(root)))
    index = _Index(files)
    own, own_params = _own_names(files, index)
    found: list[str] = []
    for rel, tree in files:
        if rel.startswith(EXEMPT):
            continue
        module = _module_name(rel) or rel
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for dotted in names:
                parts = dotted.split(".")
                if parts[0] in UPSTREAM and (any(_private(p) for p in parts)
                                             or any(dotted == m or dotted.startswith(m + ".") for m in INTERNAL_MODULES)):
                    found.append(f"{rel}:{node.lineno}: imports {dotted}")
                    break
            if isinstance(node, ast.Call):
                found.extend(f"{rel}:{node.lineno}: private keyword {k.arg}=, which no olmpipe function takes"
                             for k in node.keywords if k.arg and _private(k.arg) and k.arg not in own_params)
        # classes derived from upstream: their own private definitions and self/super uses
        in_class: dict[int, frozenset[str]] = {}
        for name, cls in index.classes[module].items():
            inherited = index.upstream(module, name)
            if inherited is None:
                continue
            for node in ast.walk(cls):
                in_class[id(node)] = inherited
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if item.name in inherited:
                        found.append(f"{rel}:{item.lineno}: {name} overrides upstream {item.name}")
                    found.extend(f"{rel}:{item.lineno}: {name}.{item.name} takes upstream's private parameter {a.arg}"
                                 for a in _params(item) if _private(a.arg))
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    found.extend(f"{rel}:{item.lineno}: {name} overrides upstream {t.id}"
                                 for t in targets if isinstance(t, ast.Name) and t.id in inherited)
        for node, obj, attr in _attribute_uses(tree):
            line = getattr(node, "lineno", 0)
            if attr in INTERNAL_ATTRIBUTES:
                found.append(f"{rel}:{line}: upstream internal .{attr}")
            elif _private(attr):
                inherited = in_class.get(id(node))
                if _is_self_or_super(obj) and inherited is not None:
                    if attr in inherited:
                        found.append(f"{rel}:{line}: upstream private .{attr} (inherited)")
                elif attr not in own:
                    found.append(f"{rel}:{line}: private .{attr}, which olmpipe does not define (upstream's?)")
        found.extend(f"{rel}:{line}: base class {dotted} does not import here"
                     for line, dotted in index.unresolved.get(module, []))
    return sorted(set(found), key=lambda s: (s.split(":")[0], int(s.split(":")[1])))
