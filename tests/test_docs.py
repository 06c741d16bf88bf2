"""The docs stay true: every link of README.md, CHANGELOG.md and docs/*.md resolves, and every
```python block of them runs as written, in a fresh interpreter. (The API reference is
generated from the docstrings when the site is built: tests/test_docs_site.py.)

A Python block that is not meant to run (a fragment, or code that needs a file of the
reader's) is marked explicitly with the ```py fence instead of ```python; every fence
names its language, so no block escapes both the run and the marking."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import source_env

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "CHANGELOG.md"] + sorted(str(p.relative_to(ROOT))
                                               for p in (ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FENCE = re.compile(r"^```(\S*)", re.M)


def test_doc_pages_exist_and_links_resolve():
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for target in re.findall(r"\]\(([^)#:]+)\)", text):
            assert (ROOT / doc).parent.joinpath(target).exists(), f"{doc}: broken link {target}"


def test_every_code_block_names_its_language():
    for doc in DOCS:
        # fences alternate open, close: the opening ones must name a language
        opening = FENCE.findall((ROOT / doc).read_text())[::2]
        assert "" not in opening, f"{doc}: a ``` block without a language"


def test_the_runnable_docs_are_all_found():
    assert {"README.md", "docs/install.md", "docs/guide.md"} <= set(DOCS)
    assert len([b for b in BLOCKS if b[0] == "docs/install.md"]) >= 1


BLOCKS = [(doc, i, code) for doc in DOCS
          for i, code in enumerate(BLOCK.findall((ROOT / doc).read_text()))]


@pytest.mark.parametrize("doc,index,code", BLOCKS,
                         ids=[f"{d}#{i}" for d, i, _ in BLOCKS])
def test_doc_code_runs(doc, index, code):
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=source_env())
    assert res.returncode == 0, f"{doc} block {index} failed:\n{code}\n{res.stderr}"
    assert "Traceback" not in res.stderr
