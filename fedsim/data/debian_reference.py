"""The Debian Reference manual in seven languages as a federation whose clients really differ.

Debian's ``debian-reference-<lang>`` packages (GPL-2+, Osamu Aoki and translators) install the
same manual as HTML under ``/usr/share/debian-reference/`` (``ch01.en.html``...). ``prepare_rows``
reads every chapter's paragraphs (tables, code blocks, tables of contents, navigation and
headings dropped; inline code kept as the sentence holds it), deals each language's chapters
among ``clients_per_language`` clients (largest chapter first, to the client with the fewest
paragraphs), shuffles the rows by a seed and writes one parquet file the ``hf:`` loader reads:
columns ``text``, ``language``, ``chapter``, ``client_id`` (``en-0``...). ``data.name=
debian-reference`` names that file under ``data.root`` (``make data`` writes it).

Run ``python -m fedsim.data.debian_reference [--source DIR] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import html.parser
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.data.prepared import prepared_path as _prepared_path
from fedsim.errors import ConfigError

NAME = "debian-reference"
LANGUAGES = ("en", "de", "es", "fr", "it", "ja", "pt")
SOURCE = Path("/usr/share/debian-reference")
CLIENTS_PER_LANGUAGE = 4
SEED = 0
LICENCE = "GPL-2+ (Debian Reference, Osamu Aoki and its translators)"
_SKIPPED = {"table", "pre", "h1", "h2", "h3", "h4", "h5", "title", "head", "script", "style"}
_SKIPPED_CLASSES = {"toc", "navheader", "navfooter", "titlepage", "list-of-tables"}
_VOID = {"br", "img", "col", "meta", "link", "hr", "input", "wbr", "area", "base"}
_CHAPTER = re.compile(r"^(pr\d+|ch\d+|ap[a-z])\.([a-z]{2})\.html$")
_SPACES = re.compile(r"\s+")


class _Paragraphs(html.parser.HTMLParser):
    """The text of every ``<p>`` outside the skipped elements of one DocBook HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._stack: list[bool] = []  # per open element: does it skip its content
        self._skipping = 0
        self._current: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return  # void elements never close
        classes = set((dict(attrs).get("class") or "").split())
        skip = tag in _SKIPPED or bool(classes & _SKIPPED_CLASSES)
        self._stack.append(skip)
        self._skipping += skip
        if tag == "p" and not self._skipping:
            self._current = []

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        if self._stack:
            self._skipping -= self._stack.pop()
        if tag == "p" and self._current is not None:
            text = _SPACES.sub(" ", "".join(self._current)).strip()
            if text:
                self.paragraphs.append(text)
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None and not self._skipping:
            self._current.append(data)


def paragraphs(page: str) -> list[str]:
    """The paragraphs of one HTML page, in order, without tables, code blocks or contents."""
    parser = _Paragraphs()
    parser.feed(page)
    parser.close()
    return parser.paragraphs


def chapter_files(source: Path, languages: tuple[str, ...] = LANGUAGES) -> dict[str, list[Path]]:
    """Each language's chapter pages under ``source`` (preface, chapters, appendices), sorted;
    ConfigError if a language has none (its package is not installed)."""
    found: dict[str, list[Path]] = {lang: [] for lang in languages}
    for path in sorted(Path(source).glob("*.html")):
        match = _CHAPTER.match(path.name)
        if match and match.group(2) in found:
            found[match.group(2)].append(path)
    missing = [lang for lang, files in found.items() if not files]
    if missing:
        raise ConfigError(
            "debian-reference source", str(source), f"has no chapter pages for {', '.join(missing)}"
            f": install debian-reference-{{{','.join(missing)}}} (or run `make data`)",
        )  # fmt: skip
    return found


def deal_chapters(sizes: dict[str, int], clients: int) -> dict[str, int]:
    """Chapter -> client: largest chapter first, each to the client with the fewest
    paragraphs so far (ties: the lower client), so the clients of a language are balanced."""
    load = [0] * clients
    owner: dict[str, int] = {}
    for chapter in sorted(sizes, key=lambda c: (-sizes[c], c)):
        k = min(range(clients), key=lambda i: (load[i], i))
        owner[chapter] = k
        load[k] += sizes[chapter]
    return owner


def prepare_rows(
    source: Path, languages: tuple[str, ...] = LANGUAGES,
    clients_per_language: int = CLIENTS_PER_LANGUAGE, seed: int = SEED,
) -> dict[str, list[Any]]:  # fmt: skip
    """The dataset's columns (text, language, chapter, client_id), rows shuffled by ``seed``."""
    if clients_per_language < 1:
        raise ConfigError("--clients-per-language", clients_per_language, "must be >= 1")
    rows: list[tuple[str, str, str, str]] = []
    for lang, files in chapter_files(source, languages).items():
        chapters = {f.name.split(".")[0]: paragraphs(f.read_text(encoding="utf-8")) for f in files}
        if clients_per_language > len(chapters):
            raise ConfigError(
                "--clients-per-language", clients_per_language,
                f"at most {len(chapters)}: language {lang} has {len(chapters)} chapters",
            )  # fmt: skip
        owner = deal_chapters({c: len(p) for c, p in chapters.items()}, clients_per_language)
        for chapter, texts in chapters.items():
            rows += [(text, lang, chapter, f"{lang}-{owner[chapter]}") for text in texts]
    order = np.random.default_rng(seed).permutation(len(rows))
    columns = ("text", "language", "chapter", "client_id")
    return {name: [rows[i][j] for i in order] for j, name in enumerate(columns)}


def write(columns: dict[str, list[Any]], out: Path) -> Path:
    """Write the columns as one parquet file (its folder created); the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), out)
    return out


def prepared_path(root: str | Path) -> Path:
    """Where ``make data`` writes the dataset under ``data.root``."""
    return _prepared_path(NAME, root)


def main(argv: list[str] | None = None) -> int:
    """Prepare the dataset from the installed packages (the ``make data`` step)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=prepared_path("data"))
    parser.add_argument("--clients-per-language", type=int, default=CLIENTS_PER_LANGUAGE)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    try:
        columns = prepare_rows(args.source, LANGUAGES, args.clients_per_language, args.seed)
    except ConfigError as error:
        print(f"error: {error}")
        return 2
    out = write(columns, args.out)
    print(f"{out}: {len(columns['text'])} paragraphs, {len(set(columns['client_id']))} clients")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
