"""Code blocks of the Markdown docs, for the tests that run them.

A fenced block's info string is its language and, optionally, ``title="path"``:

- a titled block is a file the reader writes (``python title="my_fl/data.py"``);
- ``bash`` blocks are commands the reader types; ``python`` blocks without a title are
  snippets the reader runs; ``yaml`` blocks are configs (or parts of one);
- ``console`` and ``text`` blocks are shown, not run (output, or a command that needs a
  person: ``jupyter lab``, ``wandb sync``).

``page_script`` turns a whole page into one bash script, in page order, so a tutorial can be
executed exactly as a reader would follow it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")
TITLE = re.compile(r'title="([^"]+)"')


@dataclass(frozen=True)
class Block:
    """One fenced code block: language, title (a file path) or '', its text, first line."""

    path: Path
    line: int
    language: str
    title: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of ``path`` in order."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        info, fence, indent = match["info"].strip(), match["fence"], len(match["indent"])
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][indent:])
            j += 1
        title = TITLE.search(info)
        found.append(
            Block(path, i + 1, info.split()[0] if info else "", title[1] if title else "",
                  "\n".join(body) + ("\n" if body else ""))
        )  # fmt: skip
        i = j + 1
    return found


def docs_pages() -> list[Path]:
    """The README and every page under docs/ (generated ones included)."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def commands(text: str) -> list[str]:
    """The commands of a bash block: comments dropped, ``\\`` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def with_overrides(command: str, overrides: dict[str, str]) -> str:
    """``command`` (``fedsim run`` / ``ray_jobs.reproduce``) with ``key=value`` overrides set:
    a key already given is replaced in place, the others appended (a key twice is refused)."""
    words = shlex.split(command, comments=True)
    if not any(w in ("run", "ray_jobs.reproduce", "ray_jobs.run_experiment") for w in words):
        return command
    left = dict(overrides)
    for i, word in enumerate(words):
        key = word.split("=", 1)[0]
        if "=" in word and key in left:
            words[i] = f"{key}={left.pop(key)}"
    words += [f"{k}={v}" for k, v in left.items()]
    return shlex.join(words)


def page_script(path: Path, overrides: dict[str, str], replace: dict[str, str]) -> str:
    """One bash script that does what the page says, in order: titled blocks are written to
    their files, bash blocks run (each ``fedsim run`` / ``ray_jobs`` command with
    ``overrides``), untitled python blocks run with ``python``. ``replace``: exact command
    texts swapped for test-only ones."""
    lines = ["set -euo pipefail"]
    for block in blocks(path):
        if block.title:
            folder = str(Path(block.title).parent)
            lines.append(f"mkdir -p {shlex.quote(folder)}")
            lines.append(f"cat > {shlex.quote(block.title)} <<'FEDSIM_DOCS_EOF'")
            lines.append(block.text + "FEDSIM_DOCS_EOF")
        elif block.language == "bash":
            for command in commands(block.text):
                command = replace.get(command, command)
                lines.append(f"echo '+ {command}' | cut -c1-200")
                lines.append(with_overrides(command, overrides))
        elif block.language == "python":
            lines.append("python - <<'FEDSIM_DOCS_EOF'")
            lines.append(block.text + "FEDSIM_DOCS_EOF")
    return "\n".join(lines) + "\n"
