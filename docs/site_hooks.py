"""MkDocs hooks (mkdocs.yml `hooks:`): the repository's Markdown is written to be read on
GitHub, where README.md sits at the root and docs/ links to files around it. On the site:

- README.md is the home page (index.md), its `docs/X.md` links made relative to the site;
- CHANGELOG.md is the page changelog.md;
- a link from a page to a file of the repository outside the site (`../examples/x.py`,
  `../README.md#development`) points to README's page when it is README, otherwise to the
  file in the repository (repo_url), after checking that the file exists: a link to a
  missing file is a warning, which `mkdocs build --strict` turns into an error.
"""
from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.site_hooks")
ROOT = Path(__file__).resolve().parent.parent
# [text](target) and ![alt](target), the target without a scheme
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s:]+)(\))")
PAGES = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    for page, source in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files


def _rewrite(target: str, here: str, config: Any) -> str:
    """`target` as written in the Markdown file `here` (repository path), for the site page
    that file becomes."""
    path, _, anchor = target.partition("#")
    if not path:
        return target
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(here), path))
    if repo_path.startswith("docs/"):
        page_dir = posixpath.dirname(here) if here.startswith("docs/") else "docs"
        return posixpath.relpath(repo_path, page_dir) + (f"#{anchor}" if anchor else "")
    page = {v: k for k, v in PAGES.items()}.get(repo_path)
    if page is not None:
        return posixpath.relpath(page, posixpath.dirname(here)[len("docs/"):] or ".") + \
            (f"#{anchor}" if anchor else "")
    if not (ROOT / repo_path).exists():
        log.warning("%s: link to %s, which is not in the repository", here, repo_path)
        return target
    return f"{config['repo_url'].rstrip('/')}/blob/main/{repo_path}" + \
        (f"#{anchor}" if anchor else "")


def on_page_markdown(markdown: str, page: Any, config: Any, **kwargs: Any) -> str:
    here = PAGES.get(page.file.src_uri, f"docs/{page.file.src_uri}")
    return LINK.sub(lambda m: m.group(1) + _rewrite(m.group(2), here, config) + m.group(3),
                    markdown)
