"""Plug-ins by import path: a user's model, dataset loader and algorithm, named in the config
as ``module:attribute``, run without editing fedsim (the example package in examples/),
locally and through the Ray pool, which ships the package to its workers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import untimed

from fedsim.algorithms.base import FederationInfo, WeightedSum
from fedsim.cli import main
from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.round_context import static_context
from fedsim.runtime.factory import make_executor
from fedsim.simulation import Simulation
from lightning_modules.registry import model_class

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
PLUGINS = [
    "model.name=fedsim_plugins.nets:TinyMLP",
    "data.name=fedsim_plugins.data:mnist_14px",
    "algorithm.name=fedsim_plugins.algos:FedMedian",
]
SMALL = ["rounds=2", "data.num_clients=6", "data.partition.name=iid", "runtime.executor=local"]


@pytest.fixture(autouse=True)
def examples_on_path(monkeypatch):
    """What ``PYTHONPATH=examples`` does for a user; the package is not installed."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_import_paths_resolve_while_the_config_is_validated():
    cfg = load_config("configs/quickstart.yaml", [*PLUGINS, "algorithm.trim=1"])
    assert cfg.model.name == "fedsim_plugins.nets:TinyMLP"
    assert type(cfg.algorithm.params).__name__ == "FedMedianParams"
    assert cfg.algorithm.params.trim == 1
    assert cfg.to_dict()["algorithm"] == {"name": "fedsim_plugins.algos:FedMedian", "trim": 1}
    with pytest.raises(ConfigError, match=r"algorithm\.tirm.*unknown key"):
        load_config(None, [PLUGINS[2], "algorithm.tirm=1"])


def test_built_in_names_resolve_as_before():
    from lightning_modules.cnn import FedAvgCNN
    from lightning_modules.resnet import ResNet18

    assert model_class("fedavg_cnn") is FedAvgCNN and model_class("resnet18") is ResNet18
    assert model_class("lightning_modules.cnn:FedAvgCNN") is FedAvgCNN  # the same path
    cfg = load_config(None, [])
    assert (cfg.model.name, cfg.data.name, cfg.algorithm.name) == (
        "fedavg_cnn",
        "mnist-5k",
        "fedavg",
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "model.name=no_such_pkg.nets:Net",
            "model.name='no_such_pkg.nets:Net': module 'no_such_pkg.nets' does not import "
            "(ModuleNotFoundError: No module named 'no_such_pkg')",
        ),
        (
            "model.name=fedsim_plugins.nets:Nope",
            "model.name='fedsim_plugins.nets:Nope': module 'fedsim_plugins.nets' has no "
            "attribute 'Nope'",
        ),
        (
            "model.name=fedsim_plugins.algos:FedMedian",
            "model.name='fedsim_plugins.algos:FedMedian': FedMedian is not a subclass of "
            "pytorch_lightning.core.module.LightningModule",
        ),
        ("model.name=:TinyMLP", "model.name=':TinyMLP': expected module:attribute"),
        (
            "model.name=resnet",
            "model.name='resnet': allowed: fedavg_cnn, fedavg_cnn_bn, resnet18, femnist_cnn, "
            "celeba_cnn, char_lstm, mlp, causal_lm, sequence_classifier, or module:",
        ),
        (
            "data.name=fedsim_plugins.data:nothing",
            "data.name='fedsim_plugins.data:nothing': module 'fedsim_plugins.data' has no "
            "attribute 'nothing'",
        ),
        (
            "data.name=fedsim_plugins.data:np",
            "data.name='fedsim_plugins.data:np': module is not callable",
        ),
        (
            "data.name=fedsim_plugins.data:ImageDataset",
            "required parameter 'name' is never passed",
        ),
        ("data.name=imagenet", "data.name='imagenet': allowed: mnist-5k"),
        (
            "algorithm.name=fedsim_plugins.nets:TinyMLP",
            "algorithm.name='fedsim_plugins.nets:TinyMLP': TinyMLP is not a subclass of "
            "fedsim.algorithms.base.Algorithm",
        ),
        (
            "algorithm.name=fedsim_plugins.algos:missing",
            "module 'fedsim_plugins.algos' has no attribute 'missing'",
        ),
        ("algorithm.name=fedmedian", "allowed: apfl, cwfedavg,"),
    ],
)
def test_a_bad_path_is_one_line_exit_2_before_any_run_folder(override, expected, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "configs/quickstart.yaml", override, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_loader_returning_the_wrong_type_is_a_config_error(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["data.name=fedsim_plugins.nets:TinyMLP", *SMALL, "--out", str(out)]
    assert main(["run", "configs/quickstart.yaml", *args]) == 2
    err = capsys.readouterr().err
    assert "data.name='fedsim_plugins.nets:TinyMLP': returned TinyMLP, not an ImageDataset" in err
    assert err.count("\n") == 1 and not out.exists()


def test_fed_median_aggregates_the_coordinate_wise_median():
    from fedsim_plugins.algos import FedMedian, FedMedianParams

    info = FederationInfo(None, 5, 10, None, None, [], [], {})
    models = {c: torch.tensor([float(c), 10.0 - c, c * c]) for c in range(5)}
    state = {"params": torch.zeros(3)}
    plain = FedMedian(FedMedianParams(), info).aggregate(state, {}, models, static_context(0, None))
    assert torch.equal(plain["params"], torch.tensor([2.0, 8.0, 4.0]))
    models[4] = torch.tensor([1e6, -1e6, 1e6])  # one corrupted client moves nothing
    trimmed = FedMedian(FedMedianParams(trim=1), info).aggregate(
        state, {"x": WeightedSum()}, models, static_context(0, None)
    )
    assert torch.equal(trimmed["params"], torch.tensor([2.0, 8.0, 4.0]))
    assert (
        FedMedian(FedMedianParams(), info).aggregate(state, {}, {}, static_context(0, None))
        is state
    )


def test_only_user_code_is_shipped_to_ray_workers():
    from fedsim.plugins import config_plugin_paths, plugin_paths

    cfg = load_config("configs/quickstart.yaml", PLUGINS)
    names = (cfg.model.name, cfg.data.name, cfg.algorithm.name)
    assert config_plugin_paths(*names) == [str(EXAMPLES / "fedsim_plugins")]
    assert config_plugin_paths("fedavg_cnn", "mnist-5k", "lightning_modules.cnn:FedAvgCNN") == []
    installed = ["numpy.linalg", "torch", "json", "fedsim.algorithms.fedavg", "ray_jobs"]
    assert plugin_paths(installed) == []


def run(cfg):
    sim = Simulation(cfg)
    with make_executor(cfg.runtime, sim.worker_spec, sim.data) as executor:
        return sim, executor, sim.run(executor)


def test_plugins_train_real_digits_in_process():
    cfg = load_config("configs/quickstart.yaml", [*PLUGINS, *SMALL])
    sim, _, result = run(cfg)
    assert sim.data.dataset.images.shape == (5000, 1, 14, 14)
    assert sim.federation.head_names == ["head.weight", "head.bias"]
    assert [h["num_trained"] for h in result.history] == [6, 6, 0]
    assert result.summary["final"]["acc_weighted"] > 0.6  # 10 classes: chance is 0.1


@pytest.mark.slow
def test_ray_pool_ships_the_plugins_to_its_workers(ray_cluster):
    """The workers import the package from what was uploaded (not from sys.path: the
    session's Ray was started before examples/ was on this process's path). ``fedsim run``'s
    early start creates the actors with the user's modules, so the run keeps the actors it
    started (no second start: each costs ~10 CPU-s of imports)."""
    from fedsim.early_start import start_early

    cfg = load_config("configs/quickstart.yaml", [*PLUGINS, *SMALL])
    ray_cfg = dataclasses.replace(
        cfg, runtime=dataclasses.replace(cfg.runtime, executor="ray", workers=1)
    )
    early = start_early(ray_cfg)
    assert early.pool is not None
    started = [actor._actor_id for actor in early.pool.actors]
    sim = early.simulation
    with make_executor(ray_cfg.runtime, sim.worker_spec, sim.data, pool=early.pool) as pool:
        assert [m.startswith("gcs://") for m in pool.runtime_env["py_modules"]] == [True]
        assert [actor._actor_id for actor in pool._actors] == started
        pooled = sim.run(pool)
        kept = pool.detach_pool()
    _, _, local = run(cfg)
    assert untimed(pooled.history) == untimed(local.history)
    assert torch.equal(pooled.state["params"], local.state["params"])
    # a run of fedsim's own code takes actors that carry the user's modules as they are
    plain_cfg = load_config("configs/quickstart.yaml", ["model.name=mlp", "model.hidden=[8]",
                                                        *SMALL])  # fmt: skip
    plain = Simulation(plain_cfg)
    with make_executor(ray_cfg.runtime, plain.worker_spec, plain.data, pool=kept) as pool:
        assert [actor._actor_id for actor in pool._actors] == started
        assert [h["num_trained"] for h in plain.run(pool).history] == [6, 6, 0]


def test_actors_carrying_more_modules_serve_a_run_that_needs_fewer():
    """Uploads are per module: actors started with two packages keep serving a run that
    ships one of them; a run needing a module they lack gets new actors."""
    from fedsim.runtime.shipping import carries

    both = {"py_modules": ["gcs://_ray_pkg_a.zip", "gcs://_ray_pkg_b.zip"]}
    assert carries(both, {"py_modules": ["gcs://_ray_pkg_b.zip"]})
    assert not carries({"py_modules": ["gcs://_ray_pkg_a.zip"]}, both)
    assert not carries({}, {"py_modules": ["gcs://_ray_pkg_a.zip"]})
    on_path = {"env_vars": {"PYTHONPATH": "/home/me/mine:${PYTHONPATH}"}}  # no uploader
    assert carries(on_path, on_path) and not carries(both, on_path)


def test_shipped_modules_leave_bytecode_behind(ray_cluster, tmp_path):
    """A bytecode cache written between two runs (Python writes one on import) neither
    travels nor changes what is shipped: the same upload, so a pool keeps its actors."""
    from fedsim.runtime.shipping import ship_py_modules

    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    before = ship_py_modules([str(package)])
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"stale")
    assert ship_py_modules([str(package)]) == before
    (package / "__init__.py").write_text("VALUE = 2\n")
    assert ship_py_modules([str(package)]) != before  # the source itself does count


def made_class(module: str, name: str, params: object = None, base: type | None = None) -> type:
    """An algorithm class as if written in ``module`` (not registered)."""
    from fedsim.algorithms.fedavg import FedAvg

    body = {"name": name, "__module__": module}
    if params is not None:
        body["Params"] = params
    return type("Made", (base or FedAvg,), body)


@pytest.mark.parametrize(
    ("module", "name", "params", "expected"),
    [
        ("fedsim.algorithms.fedper", "fedper", None,
         "Params is FedAvgParams, but fedsim/algorithm_params/fedper.py declares FedPerParams"),
        ("fedsim.algorithms.fedrep", "fedper", None, "name 'fedper' is not its file's, 'fedrep'"),
        ("fedsim.algorithms.newalg", "newalg", None, "fedsim/algorithm_params/newalg.py"),
        ("my_algos", "fedavg", None, "'fedavg' is fedsim/algorithms/fedavg.py's name"),
        ("my_algos", "mine", dict, "Params is not a dataclass"),
        ("my_algos", "", None, "set name"),
    ],
)  # fmt: skip
def test_register_refuses_a_class_that_disagrees_in_one_line(module, name, params, expected):
    """``register`` checks, it writes no table of keys: a built-in's name is its file's and its
    Params the one fedsim/algorithm_params/<name>.py declares."""
    from fedsim.algorithms.registry import ALGORITHMS, register

    before = dict(ALGORITHMS)
    with pytest.raises(TypeError) as raised:
        register(made_class(module, name, params))
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert ALGORITHMS == before


def test_a_class_registered_at_run_time_has_its_keys_read_from_the_class():
    """As for ``module:Class``: the config check reads ``Params`` from the class."""
    from fedsim.algorithm_params import PARAMS
    from fedsim.algorithms.fedavg import FedAvg
    from fedsim.algorithms.registry import ALGORITHMS, register

    @dataclasses.dataclass
    class DampedParams(FedAvg.Params):
        beta: float = 0.5

    cls = register(made_class("my_algos", "test_plugins_damped", DampedParams))
    try:
        named = f"algorithm.name={cls.name}"
        cfg = load_config("configs/quickstart.yaml", [named, "algorithm.beta=0.7"])
        assert isinstance(cfg.algorithm.params, DampedParams) and cfg.algorithm.params.beta == 0.7
        assert cls.name not in PARAMS  # the built-ins' keys are discovered, never written
        with pytest.raises(ConfigError, match="algorithm.nope"):
            load_config("configs/quickstart.yaml", [named, "algorithm.nope=1"])
    finally:
        del ALGORITHMS[cls.name]
