"""The CI matrix's twin parts (scripts/run_tests.py): ``CLNN_TEST_HALF`` (tests/conftest.py) splits each
parametrized test's cases into two halves that together are the whole, each holding cases of every such test."""

import collections
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_pool.py", "tests/test_amp.py"]  # parameters in several orders, lone tests, ids with dtypes


def _collected(half: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "CLNN_TEST_HALF"}
    if half is not None:
        env["CLNN_TEST_HALF"] = half
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *FILES],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == (0 if half in (None, "0", "1") else 4), done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_halves_split_each_parametrized_tests_cases():
    whole, first, second = _collected(None), _collected("0"), _collected("1")
    lone = [t for t in whole if "[" not in t]
    assert lone and len(whole) > 100
    assert sorted(first + second) == sorted(whole + lone)  # lone tests in both halves, every case in one
    assert set(first) & set(second) == set(lone)
    counts = collections.Counter(t.split("[")[0] for t in whole if "[" in t)
    for half in (first, second):
        held = collections.Counter(t.split("[")[0] for t in half if "[" in t)
        assert all(abs(2 * held[fn] - n) <= 1 for fn, n in counts.items()), (held, counts)


def test_a_bad_half_is_refused():
    _collected("2")
