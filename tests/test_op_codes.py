"""Op codes have one source, the kernel files: the host's tables are read from their ``#define``s.

These checks keep both sides complete: every op name the host passes has a kernel code, every kernel code
is dispatched by its kernel and named by the host, and the host's tables are exactly the kernel's codes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import clnn
from clnn import kernels
from clnn.ops import attention, elementwise, index, norm, pool, reduce, rnn, signal, sort
from clnn.optim import optimizers

PACKAGE = Path(clnn.__file__).resolve().parent

# Op families, named by strings on the host: (kernels_cl file, define prefix, host table, host names that
# take an op name: functions whose first argument it is, or variables assigned it).
NAMED = [
    ("unary.h", "U_", elementwise.UNARY, ("unary", "unary_grad")),
    ("elementwise.cl", "B_", elementwise.BINARY, ("_binary",)),
    ("elementwise.cl", "C_", elementwise.COMPARE, ("_compare",)),
    ("reduce.cl", "R_", reduce.OPS, ("_reduce", "_arg")),
    ("optim.cl", "OPT_", optimizers._OPS, ("_Update",)),
    ("pool.cl", "P_", pool.OPS, ("_pool",)),
]
# Flag bits, named by module constants on the host: (kernels_cl file, define prefix, module, constant prefix).
FLAGS = [
    ("norm.cl", "AFF_", norm, "AFF_"),
    ("norm.cl", "NS_", norm, "NS_"),
    ("reduce.cl", "RF_", reduce, "RF_"),
    ("optim.cl", "F_", optimizers, "_"),
    ("signal.cl", "SIG_FLIP_", signal, "FLIP_"),
    ("rnn.cl", "RNN_", rnn, "RNN_"),
    ("attention.h", "ATT_F_", attention, "F_"),
    ("index.cl", "SX_", index, "SX_"),
    ("index.cl", "SC_", sort, "SC_"),
]
FAMILIES = [(f, p) for f, p, _, _ in NAMED] + [(f, p) for f, p, _, _ in FLAGS]


def _host_strings() -> tuple[dict[str, set[str]], set[str]]:
    """Per function or variable name, the string literals passed as its first argument or assigned to it;
    and every string literal in the package."""
    passed: dict[str, set[str]] = {}
    literals: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.add(node.value)
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                passed.setdefault(name, set()).add(node.args[0].value)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                        passed.setdefault(target.id, set()).add(node.value.value)
    return passed, literals


PASSED, LITERALS = _host_strings()


def _source_without_comments(file: str) -> str:
    """kernels_cl/<file>, then the kernels_cl headers it includes (unary.h's maps: unary_maps.h), comments stripped."""
    text = (kernels.kernel_dir / file).read_text()
    included = re.findall(r'^#include "(\w+\.h)"', text, re.M)
    text += "".join((kernels.kernel_dir / name).read_text() for name in included)
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


@pytest.mark.parametrize("file, prefix, table, takers", NAMED, ids=[p for _, p, _, _ in NAMED])
def test_every_host_op_name_has_a_kernel_code(file, prefix, table, takers):
    assert table == kernels.op_codes(file, prefix)
    used = set().union(*(PASSED.get(t, set()) for t in takers))
    assert used, f"no op name passed to {takers}: has the host code moved? Update this table"
    missing = sorted(used - set(table))
    assert not missing, f"the host passes {missing} to {takers}, but kernels_cl/{file} defines no {prefix}* for them"
    unnamed = sorted(set(table) - LITERALS)
    assert not unnamed, f"kernels_cl/{file} defines {[prefix + n.upper() for n in unnamed]}, which no host code names"


@pytest.mark.parametrize("file, prefix, module, const_prefix", FLAGS, ids=[p for _, p, _, _ in FLAGS])
def test_every_host_flag_is_the_kernel_flag(file, prefix, module, const_prefix):
    host = {name[len(const_prefix):].lower(): value for name, value in vars(module).items()
            if name.startswith(const_prefix) and name[len(const_prefix):].isupper() and isinstance(value, int)}
    assert host == kernels.op_codes(file, prefix)


@pytest.mark.parametrize("file, prefix", FAMILIES, ids=[p for _, p in FAMILIES])
def test_every_kernel_code_is_distinct_and_dispatched(file, prefix):
    codes = kernels.op_codes(file, prefix)
    assert len(set(codes.values())) == len(codes), f"kernels_cl/{file}: two {prefix}* codes share a value: {codes}"
    source = _source_without_comments(file)
    for name in codes:
        uses = re.findall(rf"\b{prefix}{name.upper()}\b", source)
        assert len(uses) >= 2, f"kernels_cl/{file} defines {prefix}{name.upper()} but never uses it"


def test_op_codes_reads_only_integer_codes_with_the_prefix():
    assert kernels.op_codes("elementwise.cl", "B_")["max"] == 5
    assert "wg" not in kernels.op_codes("norm.cl", "AFF_")  # NORM_WG is a tunable, not an AFF_ code
    with pytest.raises(KeyError, match=r"kernels_cl/gemm.cl defines no integer codes NOPE_\*"):
        kernels.op_codes("gemm.cl", "NOPE_")
