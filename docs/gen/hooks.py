"""mkdocs hook: links from a page to repository files outside docs/ (``../fedsim/experiment.py``).

On GitHub such a link is an ordinary relative link. On the site the file is not a page, so
the hook checks that it exists (a missing one is a warning, which ``mkdocs build --strict``
turns into a failure, as it does for a broken link between pages) and rewrites the link to
the repository (``repo_url`` in mkdocs.yml) or, while none is set, to its plain text.
Links inside code blocks and inline code are left alone.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.fedsim_links")

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def outside_target(page_src: str, target: str, docs_dir: Path, repo: Path) -> Path | None:
    """The repository path of ``target`` when it leaves docs/, else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_src), path))
    absolute = (docs_dir / joined).resolve()
    if absolute.is_relative_to(docs_dir.resolve()):
        return None
    root = repo.resolve()
    return absolute.relative_to(root) if absolute.is_relative_to(root) else absolute


def rewrite_line(line: str, page_src: str, docs_dir: Path, repo: Path, repo_url: str) -> str:
    spans = [m.span() for m in CODE_SPAN.finditer(line)]

    def replace(match: re.Match) -> str:
        if any(a <= match.start() < b for a, b in spans):
            return match.group(0)
        target = match.group("target")
        found = outside_target(page_src, target, docs_dir, repo)
        if found is None:
            return match.group(0)
        if found.is_absolute() or not (repo / found).exists():
            log.warning("%s: link to %s, which is not in the repository", page_src, target)
            return match.group(0)
        if not repo_url:
            return match.group("text")
        kind = "tree" if (repo / found).is_dir() else "blob"
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        url = f"{repo_url.rstrip('/')}/{kind}/main/{found.as_posix()}{anchor}"
        return f"[{match.group('text')}]({url})"

    return LINK.sub(replace, line)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - mkdocs API
    docs_dir = Path(config["docs_dir"])
    repo = Path(config["config_file_path"]).parent
    repo_url = config.get("repo_url") or ""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        src = page.file.src_uri
        out.append(line if fenced else rewrite_line(line, src, docs_dir, repo, repo_url))
    return "\n".join(out)
