"""Reports of a next-token run read its own metric (issue 61): no label-distribution or
accuracy-vs-classes plot (one class), ``fedsim report --compare`` in perplexity, and
``--no-progress`` silences the model loader's bars. On the tiny Llama of ``lora_fixtures.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lora_fixtures import build_tiny_model, shared_tiny_model

from fedsim.cli import main

pytestmark = [pytest.mark.xdist_group("lora"), pytest.mark.usefixtures("few_plays")]



def lm_args(tiny: str | Path, root: Path) -> list[str]:
    return [
        "runtime.executor=local", "data.name=shakespeare-lm", "data.num_clients=2",
        "data.min_samples=8", "data.max_client_samples=6", "data.max_length=16",
        f"data.root={root}", "model.name=causal_lm", f"model.args={{source: {tiny}, rank: 2}}",
        "rounds=1", "client.batch_size=4",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fedsim.config import load_config
    from fedsim.experiment import run_experiment

    tiny = shared_tiny_model(tmp_path_factory.getbasetemp())
    out = tmp_path_factory.mktemp("lm-report") / "run"
    cfg = load_config("configs/quickstart.yaml", lm_args(tiny, out.parent / "data"))
    run_experiment(cfg, out, progress=False, report=True)
    return out


def test_a_next_token_run_draws_no_class_plots(lm_run):
    from fedsim.tracking.report import LABEL_DISTRIBUTION, VS_CLASSES, write_report

    names = {p.name for p in (lm_run / "plots").glob("*.png")}
    assert "perplexity.png" in names
    assert LABEL_DISTRIBUTION not in names and VS_CLASSES not in names
    assert all(p.name not in (LABEL_DISTRIBUTION, VS_CLASSES) for p in write_report(lm_run))


def test_compare_draws_perplexity_for_runs_that_predict_tokens(lm_run, tmp_path, monkeypatch):
    from fedsim.tracking import compare_plot
    from fedsim.tracking.run_data import load_run

    figures = []
    monkeypatch.setattr(compare_plot, "save_figure", lambda fig, path: figures.append(fig))
    compare_plot.plot_accuracy_vs_time([load_run(lm_run)], tmp_path / "c.png")
    ax = figures[0].axes[0]
    assert ax.get_ylabel().startswith("test perplexity") and ax.get_yscale() == "log"
    line = ax.get_lines()[0]
    metrics = load_run(lm_run).metrics
    assert list(line.get_ydata()) == [m["perplexity"] for m in metrics]


def test_no_progress_silences_the_model_loaders_bars(tmp_path, capfd):
    import os

    import huggingface_hub
    import transformers

    try:
        seen = []
        for flag, name in (([], "a"), (["--no-progress"], "b")):  # a base not loaded yet
            tiny = build_tiny_model(tmp_path / f"tiny-{name}")
            capfd.readouterr()
            code = main(["run", "configs/quickstart.yaml", *lm_args(tiny, tmp_path / "data"),
                         "--out", str(tmp_path / name), *flag])  # fmt: skip
            assert code == 0
            seen.append("Loading weights" in capfd.readouterr().err)
        assert seen == [True, False]
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    finally:
        os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        transformers.utils.logging.enable_progress_bar()
        huggingface_hub.utils.enable_progress_bars()


def test_auto_costs_a_language_model_by_its_whole_model_on_every_token(tmp_path):
    from fedsim.config import RuntimeConfig, load_config
    from fedsim.runtime.executor_choice import (
        EVAL_SHARE,
        SECONDS_PER_PARAM_TOKEN,
        RunWork,
        choose_executor,
    )
    from fedsim.simulation import Simulation

    tiny = shared_tiny_model(tmp_path.parent)
    simulation = Simulation(load_config("configs/quickstart.yaml", lm_args(tiny, tmp_path)))
    work = RunWork.of(simulation)
    whole = sum(p.numel() for p in simulation.template.parameters())
    assert work.params == whole > 50 * simulation.initial_params.numel()  # the base counts
    assert work.tokens == 16
    train = sum(len(c.train) for c in simulation.data.clients)  # every client, one epoch
    tested = sum(len(c.test) for c in simulation.data.clients)
    by_hand = (1 * train + 2 * tested * EVAL_SHARE) * 16 * whole * SECONDS_PER_PARAM_TOKEN
    assert work.local_seconds() == pytest.approx(by_hand)
    with pytest.MonkeyPatch.context() as patch:  # as in a fresh process: no Ray joined yet
        patch.delitem(sys.modules, "ray", raising=False)  # (another test here may have)
        line = choose_executor(RuntimeConfig(), work).line()
    assert f"{whole / 1e6:.1f} M parameters x 16 tokens a sample" in line and "rough" in line
