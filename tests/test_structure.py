"""The package's structure, read from its source with ``ast``: ops stack in layers, clnn imports sit at
module top, the device lock stays in device.py and ops' toolkit (``ops._core``) stays in ops; and the kernels'
source keeps ruff's line length, which ruff does not read.

Each rule is a function returning its violations; the tests run it on the package and on a snippet that
breaks it, so none can pass by seeing nothing.
"""

import ast
import re
from pathlib import Path

import pytest

import clnn
from clnn.kernels import kernel_dir

PACKAGE = Path(clnn.__file__).resolve().parent
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# clnn/ops/ from the bottom up (DEVELOPERS.md, "Layout"): a module imports only modules before it. (Tensor's
# operators reach every op through the one late binding at the end of clnn/tensor.py, not an import.)
LAYERS = ["_core", "foreach", "random", "creation", "shape", "reduce", "elementwise", "sort", "index", "scan", "matmul",
          "einsum", "activation", "pool", "signal", "norm", "loss", "winograd", "conv", "rnn", "attention"]
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _sources() -> dict[str, str]:
    """Every module of the package by its path relative to the package (``ops/shape.py``)."""
    return {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _kernel_sources() -> dict[str, str]:
    """Every file of kernels_cl/ by its name (``gemm.h``)."""
    return {p.name: p.read_text() for p in sorted(kernel_dir.iterdir()) if p.suffix in (".cl", ".h")}


def long_line_violations(sources: dict[str, str]) -> list[str]:
    """Lines longer than pyproject.toml's ruff ``line-length``."""
    limit = int(re.search(r"^line-length = (\d+)", PYPROJECT.read_text(), re.M)[1])
    return [f"{rel}:{i}: {len(line)} characters" for rel, text in sources.items()
            for i, line in enumerate(text.splitlines(), 1) if len(line) > limit]


def _imported(node: ast.Import | ast.ImportFrom, rel: str) -> list[str]:
    """The dotted clnn modules (or module.name) ``node`` in module ``rel`` refers to; [] for other packages."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "clnn"]
    if node.level == 0:
        base = node.module or ""
        if base.split(".")[0] != "clnn":
            return []
    else:
        package = ["clnn", *rel.split("/")[:-1]]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" for a in node.names]


def _in_functions(tree: ast.AST) -> list[ast.AST]:
    """Import statements inside a function body."""
    found = {n: None for f in ast.walk(tree) if isinstance(f, FUNCTIONS)  # a dict: nested functions repeat
             for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
    return list(found)


def layer_violations(sources: dict[str, str]) -> list[str]:
    """Op modules importing an op module of their own or a higher layer, or importing inside a function."""
    found = []
    for rel, text in sources.items():
        if not rel.startswith("ops/") or rel == "ops/__init__.py":
            continue
        me = rel[len("ops/"):-len(".py")]
        tree = ast.parse(text)
        found += [f"{rel}:{n.lineno}: import inside a function" for n in _in_functions(tree)]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported(node, rel):
                parts = name.split(".")
                if name == "clnn.ops" or parts[:2] == ["clnn", "ops"] and (
                        parts[2] not in LAYERS or LAYERS.index(parts[2]) >= LAYERS.index(me)):
                    found.append(f"{rel}:{node.lineno}: {me} imports {name}, not from a lower layer")
    return found


def late_import_violations(sources: dict[str, str]) -> list[str]:
    """clnn modules imported inside a function anywhere in the package (optional third-party packages may be)."""
    return [f"{rel}:{n.lineno}: imports {_imported(n, rel)} inside a function"
            for rel, text in sources.items() for n in _in_functions(ast.parse(text)) if _imported(n, rel)]


def lock_violations(sources: dict[str, str]) -> list[str]:
    """Uses of a ``_lock`` attribute (the Device's enqueue lock) outside clnn/device.py."""
    return [f"{rel}:{n.lineno}: uses .{n.attr}" for rel, text in sources.items() if rel != "device.py"
            for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Attribute) and n.attr == "_lock"]


def core_violations(sources: dict[str, str]) -> list[str]:
    """Modules outside clnn/ops importing ``clnn.ops._core``: it is the ops' toolkit (``empty``, ``record``);
    other modules call ops' public functions. (The tests' conftest takes its test aid
    ``poison_new_tensors`` from it.)"""
    found = []
    for rel, text in sources.items():
        if rel.startswith("ops/"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found += [f"{rel}:{node.lineno}: imports {name}" for name in _imported(node, rel)
                          if name.startswith("clnn.ops._core")]
    return found


def test_every_op_module_has_a_layer():
    modules = {rel[len("ops/"):-len(".py")] for rel in _sources() if rel.startswith("ops/")} - {"__init__"}
    assert modules == set(LAYERS)


@pytest.mark.parametrize(("rule", "bad"), [
    (layer_violations, {"ops/shape.py": "from .reduce import sum\n"}),
    (layer_violations, {"ops/shape.py": "from clnn.ops import conv\n"}),
    (layer_violations, {"ops/reduce.py": "from . import reduce\n"}),
    (layer_violations, {"ops/reduce.py": "from .. import ops\n"}),
    (layer_violations, {"ops/conv.py": "def f():\n    import numpy\n"}),
    (late_import_violations, {"nn/utils.py": "def f():\n    from ..ops.creation import zeros\n"}),
    (late_import_violations, {"tune.py": "def f():\n    import clnn.ops\n"}),
    (lock_violations, {"profiler.py": "with dev._lock:\n    pass\n"}),
    (core_violations, {"signal.py": "from .ops._core import empty\n"}),
    (core_violations, {"nn/layers.py": "from ..ops import _core\n"}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_rules_hold_for_the_package_and_catch_a_breach(rule, bad):
    assert rule(_sources()) == []
    assert rule(bad)


def test_kernel_sources_keep_the_line_length():
    assert long_line_violations(_kernel_sources()) == []
    assert long_line_violations({"gemm.h": "/* " + "x" * 118 + " */"}) == ["gemm.h:1: 124 characters"]


def test_rules_allow_what_they_should():
    ok = {
        "ops/conv.py": "from .. import kernels\nfrom ._core import empty\nfrom .matmul import gemm_raw\n",
        "nn/training.py": "def f():\n    from tqdm.auto import tqdm\n",
        "device.py": "with self._lock:\n    pass\n",
        "data.py": "from .ops.creation import empty\n",
    }
    for rule in (layer_violations, late_import_violations, lock_violations, core_violations):
        assert rule(ok) == [], rule.__name__
