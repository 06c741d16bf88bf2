"""The docs stay true: docs/api.md matches the docstrings, and every ```python block of
the README and the guides runs as written (```py blocks are fragments, not run)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import source_env

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/guide.md", "docs/testing.md", "docs/migrating-from-kompute.md",
        "docs/troubleshooting.md", "docs/scale.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_api_reference_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_api.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, (res.stderr or res.stdout) + \
        "\nRegenerate it: python docs/gen_api.py"


def test_doc_pages_exist_and_links_resolve():
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for target in re.findall(r"\]\(([^)#:]+)\)", text):
            assert (ROOT / doc).parent.joinpath(target).exists(), f"{doc}: broken link {target}"


BLOCKS = [(doc, i, code) for doc in DOCS
          for i, code in enumerate(BLOCK.findall((ROOT / doc).read_text()))]


@pytest.mark.parametrize("doc,index,code", BLOCKS,
                         ids=[f"{d}#{i}" for d, i, _ in BLOCKS])
def test_doc_code_runs(doc, index, code):
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=source_env())
    assert res.returncode == 0, f"{doc} block {index} failed:\n{code}\n{res.stderr}"
    assert "Traceback" not in res.stderr
