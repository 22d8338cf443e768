"""The machine-speed line CI prints before the suite (.ci/machine_speed.py): both figures
measured, each against its reference, in one line."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SPEED = Path(__file__).resolve().parents[1] / ".ci" / "machine_speed.py"


def load_speed():
    spec = importlib.util.spec_from_file_location("machine_speed", SPEED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_line_gives_each_figure_and_the_slowest_ratio(monkeypatch, capsys):
    speed = load_speed()
    for name, value in (("STEPS", 5), ("WARM_UP", 1), ("PASSES", 1)):
        monkeypatch.setattr(speed, name, value)
    monkeypatch.setattr(speed, "import_cpu", lambda: 2 * speed.REFERENCE["import"])
    assert speed.main() == 0
    line = capsys.readouterr().out.strip()
    found = re.fullmatch(
        r"machine speed: import torch\+Lightning ([\d.]+) CPU-s \(ref [\d.]+\); 5 CNN steps "
        r"([\d.]+) CPU-s \(ref [\d.]+\); slowest ratio ([\d.]+)x the reference", line
    )  # fmt: skip
    assert found, line
    assert float(found[2]) > 0  # the steps were run and timed
    assert float(found[3]) == pytest.approx(2.0, abs=0.01)  # 5 steps are far below their ref
