"""The README's Python examples run as written: every ```python block, in order, in one namespace (later blocks
use earlier ones' names, as a reader would), in a fresh process inside a scratch directory."""

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
# sections whose blocks are fragments for a particular machine, not programs for this one
SKIPPED = {
    "Devices": "names devices ('gpu', '1:0') a machine may lack",
    "Distributed training": "runs under mpiexec, with a model and data from the reader's program",
}


def blocks() -> list[tuple[str, str]]:
    """(section, code) of every ```python block in the README."""
    found, section = [], ""
    for part in re.split(r"^(## .*)$", README.read_text(), flags=re.M):
        if part.startswith("## "):
            section = part[3:].strip()
            continue
        found += [(section, code) for code in re.findall(r"^```python\n(.*?)^```", part, flags=re.M | re.S)]
    return found


def test_readme_examples_run(tmp_path):
    run = [code for section, code in blocks() if section not in SKIPPED]
    assert len(run) >= 4, f"expected the README's Python examples; found {len(run)}"
    script = tmp_path / "readme_examples.py"
    script.write_text("\n".join(run))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def test_skipped_sections_exist():
    assert set(SKIPPED) <= {section for section, _ in blocks()}
