"""The upload pipeline's seam: client stages on the worker, per-step gradient clipping, the
default path untouched, local == Ray with a robust rule on, and bad input (one line, exit 2).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import NARROW_CNN, lent_ray_executor, refused_check, untimed

from fedsim.algorithms.base import ModelUpload
from fedsim.config import load_config
from fedsim.data.datasets import ImageDataset
from fedsim.deployment.stages.attack import CorruptDelta
from fedsim.deployment.stages.clip import ClipDelta
from fedsim.deployment.stages.compress import Compress, CompressStage
from fedsim.deployment.stages.noise import LocalNoise
from fedsim.deployment.upload import UploadJob, run_client_steps, upload_nbytes
from fedsim.runtime.executor import LocalExecutor
from fedsim.runtime.training import train_client
from fedsim.simulation import Simulation, build_data, cached_dataset


def stages(steps, start, trained, ranges=None):
    job = UploadJob(seed=0, model=ModelUpload(ranges=ranges), steps=tuple(steps))
    return run_client_steps(job, start, trained, 0, 0)


def test_clipping_acts_on_the_uploaded_delta_only():
    start = torch.tensor([1.0, 1.0, 5.0, 5.0])
    trained = torch.tensor([4.0, 5.0, 7.0, 9.0])  # delta of the upload (0..2): (3, 4), norm 5
    out, report = stages([ClipDelta(1.0)], start, trained, ranges=[(0, 2)])
    assert out.tolist() == pytest.approx([1.6, 1.8, 7.0, 9.0])  # personal entries untouched
    assert report.norm == pytest.approx(5.0)
    out, report = stages([ClipDelta(10.0)], start, trained, [(0, 2)])
    assert torch.equal(out, trained) and report.norm == pytest.approx(5.0)


def test_attack_then_clip_then_noise_in_that_order():
    start, trained = torch.zeros(4), torch.tensor([3.0, 4.0, 0.0, 0.0])
    out, _ = stages([CorruptDelta("sign_flip", 4.0), ClipDelta(1.0)], start, trained)
    assert out.tolist() == pytest.approx([-0.6, -0.8, 0.0, 0.0])  # -4 delta, clipped to 1
    big_start, big = torch.zeros(40000), torch.zeros(40000)
    out, _ = stages([ClipDelta(2.0), LocalNoise(0.5 * 2.0)], big_start, big)
    assert out.std().item() == pytest.approx(0.5 * 2.0, rel=0.03)  # z * C
    out, _ = stages([LocalNoise(0.01)], big_start, big, ranges=[(0, 20000)])
    assert out[:20000].std().item() == pytest.approx(0.01, rel=0.03)
    assert out[20000:].abs().sum().item() == 0.0  # FedPer: only the uploaded base is noised


def test_topk_with_error_feedback_and_bytes_up():
    stage = CompressStage(load_config(None, ["compression.kind=topk",
                          "compression.fraction=0.25", "compression.error_feedback=true"]
                          ).compression)  # fmt: skip
    start, trained = torch.zeros(8), torch.tensor([0.1, -5.0, 0.2, 3.0, 0.0, 0.0, 0.3, 0.0])
    out, report = stages([stage.client_step(0, 0)], start, trained)
    assert out.tolist() == pytest.approx([0, -5.0, 0, 3.0, 0, 0, 0, 0])
    assert report.residual.tolist() == pytest.approx([0.1, 0, 0.2, 0, 0, 0, 0.3, 0])
    assert report.sparse_nbytes == 2 * 4 + 2 * 4  # two int32 indices, two float32 values
    assert upload_nbytes(32 + 100, report) == 100 + 16  # dense model bytes replaced
    # next round: the stage hands the client its residual, added before compressing
    stage.residuals[0] = report.residual
    step = stage.client_step(0, 1)
    assert isinstance(step, Compress) and torch.equal(step.residual, report.residual)
    again, later = stages([step], start, torch.zeros(8))
    assert again.tolist() == pytest.approx([0, 0, 0.2, 0, 0, 0, 0.3, 0])
    assert later.residual.tolist() == pytest.approx([0.1, 0, 0, 0, 0, 0, 0, 0])


def test_clip_grad_norm_bounds_every_step():
    from lightning_modules.registry import build_model

    data = build_data(load_config(None, ["data.max_samples=200", "data.num_clients=2"]))
    torch.manual_seed(0)
    module = build_model("fedavg_cnn", **data.dataset.model_kwargs(), lr=0.1)
    before = torch.cat([p.detach().flatten().clone() for p in module.parameters()])
    indices = np.asarray(data.clients[0].train)
    train_client(
        module, data, indices, epochs=1, batch_size=len(indices),
        generator=torch.Generator().manual_seed(0), clip_grad_norm=0.01,
    )  # fmt: skip
    after = torch.cat([p.detach().flatten() for p in module.parameters()])
    assert (after - before).norm().item() == pytest.approx(0.1 * 0.01, rel=1e-3)  # lr * C


# ------------------------------------------------------------------ whole runs

TINY = [
    "rounds=2",
    "data.name=mnist-5k",
    "data.num_clients=6",
    "data.partition.name=iid",
    "client.lr=0.05",
    "runtime.executor=local",
    "runtime.device=cpu",
    *NARROW_CNN,  # the pipeline's order, identity and resume: not about the net
]


def small_data(cfg):
    full = cached_dataset("mnist-5k", "data", True)
    keep = np.sort(np.random.default_rng(0).choice(len(full), 480, replace=False))
    subset = ImageDataset(full.name, full.images[keep], full.labels[keep], full.num_classes)
    return build_data(cfg, subset)


def run(*extra: str, executor=None):
    torch.set_num_threads(1)  # as a worker does: more threads on a busy CPU only spin
    cfg = load_config(None, [*TINY, *extra])
    sim = Simulation(cfg, small_data(cfg))
    pool = executor(sim) if executor else LocalExecutor(sim.worker_spec, sim.data)
    try:
        return sim, sim.run(pool)
    finally:
        pool.close()


@pytest.mark.slow
def test_inactive_options_leave_the_run_bit_identical():
    _, plain = run()
    _, noop = run("attack.kind=sign_flip", "attack.fraction=0")  # pipeline on, changes nothing
    assert torch.equal(noop.state["params"], plain.state["params"])
    strip = [{k: v for k, v in h.items() if k != "attackers"} for h in untimed(noop.history)]
    assert strip == untimed(plain.history)


@pytest.mark.slow
def test_ray_pool_equals_local_executor_with_a_robust_rule(ray_pool):
    options = (
        "aggregation.rule=median",
        "aggregation.anomaly_cosine=0.0",
        "attack.kind=sign_flip",
        "attack.fraction=0.34",
        "compression.kind=topk",
        "compression.fraction=0.1",
        "compression.error_feedback=true",
    )

    _, local = run(*options)
    sim, ray_run = run(*options, executor=lambda sim: lent_ray_executor(sim, ray_pool))
    assert untimed(ray_run.history) == untimed(local.history)
    assert torch.equal(ray_run.state["params"], local.state["params"])
    assert sim.deployment.stage(CompressStage).residuals  # error feedback: one per client
    assert "anomaly_dropped" in local.history[0]


@pytest.mark.slow
def test_privacy_is_reported_per_round_and_in_the_summary():
    _, result = run("privacy.mode=central", "privacy.clip_norm=1.0", "privacy.adaptive=true")
    first, second = result.history[0], result.history[1]
    assert 0 < first["epsilon"] < second["epsilon"]
    assert first["clip_norm"] == 1.0 and second["clip_norm"] != 1.0  # adapted
    assert result.summary["privacy"] == {"epsilon": second["epsilon"], "delta": 1e-5}


@pytest.mark.slow
def test_resume_keeps_error_feedback_and_the_adaptive_clip_norm(tmp_path):
    from fedsim.checkpoint import latest_checkpoint, load_checkpoint

    torch.set_num_threads(1)
    options = [
        "compression.kind=topk",
        "compression.error_feedback=true",
        "privacy.mode=local",
        "privacy.clip_norm=1.0",
        "privacy.noise_multiplier=0.01",
        "privacy.adaptive=true",
        "checkpoint_every=1",
    ]

    def simulation(rounds: int) -> Simulation:
        cfg = load_config(None, [*TINY, *options, f"rounds={rounds}"])
        return Simulation(cfg, small_data(cfg))

    whole = simulation(2)
    straight = whole.run(LocalExecutor(whole.worker_spec, whole.data))
    first = simulation(1)
    first.run(LocalExecutor(first.worker_spec, first.data), run_dir=tmp_path)
    checkpoint = load_checkpoint(latest_checkpoint(tmp_path))
    assert checkpoint.deployment["residuals"] and checkpoint.deployment["clip_norm"] != 1.0
    rest = simulation(2)
    resumed = rest.run(LocalExecutor(rest.worker_spec, rest.data), resume=checkpoint)
    assert untimed(resumed.history) == untimed(straight.history)
    assert torch.equal(resumed.state["params"], straight.state["params"])


# ------------------------------------------------------------------ bad input


BAD = [
    ("privacy.noise_multiplier=-1", "privacy.noise_multiplier=-1"),
    ("privacy.sigma=-0.1", "privacy.sigma=-0.1"),
    ("privacy.clip_norm=0", "privacy.clip_norm=0"),
    ("aggregation.rule=geomedian", "aggregation.rule='geomedian'"),
    ("aggregation.rule=krum aggregation.krum_f=1 data.num_clients=4", "aggregation.krum_f=1"),
    ("aggregation.rule=bulyan aggregation.krum_f=1 data.num_clients=6", "aggregation.krum_f=1"),
    ("privacy.mode=local", "privacy.clip_norm=null"),
    ("algorithm.name=fedamp privacy.mode=fixed_sigma", "privacy.mode='fixed_sigma'"),
    ("algorithm.name=cwfedavg aggregation.rule=median", "aggregation.rule='median'"),
    ("privacy.mode=central privacy.clip_norm=1 aggregation.rule=median", "privacy.mode="),
    ("compression.fraction=0", "compression.fraction=0"),
    ("attack.fraction=1.5", "attack.fraction=1.5"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD)
def test_bad_deployment_options_are_one_line_exit_2_and_no_run_folder(
    overrides, needle, capsys, tmp_path
):
    assert needle in refused_check(overrides, capsys, tmp_path)
