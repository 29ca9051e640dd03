"""The README's and docs' Python code blocks run as written (issue 13: they had rotted).

Every block fenced as ``python`` runs; the blocks of one page run in order, as one script
(later blocks use what earlier ones defined), in a fresh interpreter in an empty directory.
A block fenced as ``python excerpt`` is shown, not run: an excerpt of fuselite's source, or
code that needs something a page cannot give (a compiled kernel library).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_code_blocks_run_as_written(page, tmp_path):
    blocks = python_blocks(page)
    script = "\n\n".join(f"# --- block {i + 1} of {page.name}\n{b}" for i, b in enumerate(blocks))
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={"TF_CPP_MIN_LOG_LEVEL": "3", **__import__("os").environ})
    assert out.returncode == 0, f"{page.name}: {out.stderr[-3000:]}"
