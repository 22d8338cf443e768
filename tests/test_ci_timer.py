"""The suite's closing figures (.ci/timed.py): the CPU of a process orphaned on the way (as
a Ray worker is when its raylet goes first) is counted, and the command's exit code kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TIMED = Path(__file__).resolve().parents[1] / ".ci" / "timed.py"
# a grandchild that outlives its parent and burns ~1.5 s of CPU
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass"
ORPHAN = f"(python3 -c '{BURN}') & exit 3"


def test_an_orphans_cpu_is_counted_and_the_exit_code_kept():
    done = subprocess.run([sys.executable, str(TIMED), "suite", "--", "bash", "-c", ORPHAN],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 3, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    found = re.fullmatch(r"suite: 0m\d\ds wall, ([\d.]+) CPU-minutes \(user [\d.]+ \+ system "
                         r"[\d.]+\)", last)  # fmt: skip
    assert found, last
    assert float(found[1]) >= 0.02, last  # 1.5 s = 0.025 min: the orphan was counted
