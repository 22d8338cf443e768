"""Local steps, gradient accumulation and a warm-up within a client's training (issue 61):
each by hand on the training loop, refused where it cannot act, and counted in the virtual
clock and the FLOPs. Each is one field of ``ClientWork``: ``WorkerSpec`` lists none of them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quickstart

from fedsim.client_work import LocalWork
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.experiment import run_experiment
from fedsim.rounds.clock.build import compute_clock
from fedsim.runtime.training import train_client
from fedsim.runtime.worker_spec import WorkerSpec

X = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
Y = (X.sum(1) > 0).long()


class Rows:
    """The data's ``batch(indices)``, over X and Y."""

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return X[torch.as_tensor(indices)], Y[torch.as_tensor(indices)]


class Linear(pl.LightningModule):
    """Plain SGD on a linear layer; records each optimizer step's lr."""

    def __init__(self, lr: float = 0.1):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 2)
        self.lr, self.lrs, self.seen = lr, [], 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        self.opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        return self.opt

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.lrs.append(self.opt.param_groups[0]["lr"])
        self.seen += len(batch[1])


def train(module: Linear, n: int = 40, **settings) -> object:
    settings = {"epochs": 1, "batch_size": 4, **settings}
    generator = torch.Generator().manual_seed(1)
    return train_client(module, Rows(), np.arange(n), generator=generator, **settings)


def test_steps_take_exactly_that_many_optimizer_steps_across_passes():
    result = train(Linear(), n=10, steps=7)  # 3 batches a pass: two passes and one batch
    assert result.optimizer_steps == 7 and result.steps == 7
    assert train(Linear(), n=10, steps=3).optimizer_steps == 3
    assert train(Linear(), n=10).optimizer_steps == 3  # one epoch: ceil(10 / 4)


def test_accumulating_two_batches_is_one_step_on_twice_the_batch():
    accumulated, whole = Linear(), Linear()
    result = train(accumulated, batch_size=4, accumulation=2, steps=1)
    train(whole, batch_size=8, steps=1)
    assert result.optimizer_steps == 1 and result.steps == 2  # two micro-batches
    for a, b in zip(accumulated.parameters(), whole.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7)
    moved = train(Linear(), batch_size=4, steps=1)  # one micro-batch alone differs
    assert moved.optimizer_steps == 1


def test_warmup_takes_the_lr_up_linearly_per_step():
    module = Linear(lr=0.1)
    train(module, n=24, batch_size=4, warmup_steps=4)  # 6 steps
    assert module.lrs == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1])


@pytest.mark.parametrize(("steps", "accumulation"), [(3, 2), (7, 1), (4, 3), (None, 2)])
def test_the_samples_formula_is_what_the_loop_trains_on(steps, accumulation):
    module = Linear()
    result = train(module, n=10, steps=steps, accumulation=accumulation)
    local = LocalWork(batch_size=4, steps=steps, accumulation=accumulation)
    assert module.seen == local.samples(0, 10)
    if steps is not None:
        assert result.optimizer_steps == steps


def test_samples_a_round_by_hand_and_in_the_virtual_clock():
    assert LocalWork(epochs=2).samples(0, 25) == 50
    steps = LocalWork(batch_size=10, steps=4)  # 3 batches a pass: one pass and one batch
    assert steps.samples(0, 25) == 25 + 10
    # 3 batches a pass make 2 steps of 2 (the pass's last step takes its last batch alone)
    assert LocalWork(batch_size=10, steps=2, accumulation=2).samples(0, 25) == 25
    assert LocalWork(batch_size=10, steps=3, accumulation=2).samples(0, 25) == 45
    cfg = load_config(None, ["system.time_per_sample=2.0"])
    _, durations = compute_clock(cfg, np.array([25, 5]), steps)
    assert durations.tolist() == [2.0 * 35, 2.0 * 20]  # 5 samples: 4 passes


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["client.steps=3", "client.epochs=2"], r"client\.epochs=2: acts only with client\.steps"),
        (["client.steps=0"], r"client\.steps=0: must be an integer >= 1"),
        (["client.grad_accumulation=0"], r"client\.grad_accumulation=0: must be"),
        (["client.steps=3", "algorithm.name=fednova"], r"client\.steps=3: algorithm\.name=fednova"),
        (["client.warmup_steps=2", "algorithm.name=pfedme"], r"client\.warmup_steps=2: algorithm"),
    ],
)
def test_local_work_that_cannot_act_is_refused_in_one_line(overrides, needle):
    from fedsim.simulation import Simulation

    with pytest.raises(ConfigError, match=needle) as err:
        Simulation(quickstart("data.num_clients=4", "data.max_samples=200", *overrides))
    assert "\n" not in str(err.value)


def test_a_per_client_setting_is_written_once():
    names = {f.name for f in dataclasses.fields(WorkerSpec)}
    assert names == {"model", "client", "algorithm", "num_threads", "device"}


def flops(tmp_path, name: str, *overrides: str) -> float:
    cfg = quickstart(
        "data.num_clients=2", "data.max_samples=400", "rounds=1", "join_ratio=1",
        "eval.count_flops=true", "runtime.executor=local", "client.batch_size=10", *overrides,
    )  # fmt: skip
    result = run_experiment(cfg, tmp_path / name, progress=False, report=False)
    return result.history[0]["flops_per_client"]


def test_local_work_is_counted_in_the_flops(tmp_path):
    two = flops(tmp_path, "two", "client.steps=2")
    four = flops(tmp_path, "four", "client.steps=4")
    accumulated = flops(tmp_path, "acc", "client.steps=2", "client.grad_accumulation=2")
    assert four == 2 * two and accumulated == four
