"""``fedsim sample RUN_FOLDER --prompt TEXT [--client NAME]``: text from the base model with a
client's adapter (or the global one), as the run wrote them (``adapter_export.py``).

The adapter is read back by plain peft (``PeftModel.from_pretrained``) from the run's
``adapters/`` folder, over the base the run named (``model.args.source``, loaded as fedsim
loads it: a folder, a GGUF file, SmolLM2's package), and the prompt is tokenized by the run's
tokenizer, written as its instruction data was (if it had some). Greedy unless
``--temperature`` > 0; seeded either way. Every mistake is one line naming the argument.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from fedsim.errors import ConfigError
from fedsim.pretrained import SMOLLM2, load_frozen_base, load_tokenizer, shared_copy

LM_MODELS = ("causal_lm",)


def read_run(run_dir: Path) -> dict[str, Any]:
    """The run's resolved config; a ConfigError unless it is a language-model run."""
    key = "RUN_FOLDER"
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(key, str(run_dir), "not a run folder (it has no config.yaml)")
    config = yaml.safe_load(path.read_text()) or {}
    model = (config.get("model") or {}).get("name")
    if model not in LM_MODELS:
        raise ConfigError(
            key,
            str(run_dir),
            f"is a run of model.name={model}: fedsim sample "
            f"reads the adapters of a language model ({', '.join(LM_MODELS)})",
        )
    return config


def adapter_folder(run_dir: Path, client: str | None) -> tuple[Path, str]:
    """The peft folder to sample from and what it is, for ``client`` (None: the global)."""
    from fedsim.runtime.adapter_export import INDEX  # imports torch: not at `fedsim` start-up

    index_path = run_dir / "adapters" / INDEX
    if not index_path.is_file():
        raise ConfigError(
            "RUN_FOLDER",
            str(run_dir),
            "has no adapters/ (written when a LoRA "
            "run ends; a run that stopped early, or wrote none, has none)",
        )
    index = json.loads(index_path.read_text())
    clients: dict[str, Any] = index.get("clients") or {}
    glob = index.get("global")
    if client is None:
        if glob is None:
            some = ", ".join(list(clients)[:5])
            raise ConfigError(
                "--client",
                None,
                "this run has no global adapter (its algorithm "
                f"keeps personal parts): name a client, e.g. {some}",
            )
        return run_dir / "adapters" / glob["folder"], "the global adapter"
    by_id = {str(e["id"]): n for n, e in clients.items()}
    name = client if client in clients else by_id.get(client)
    if name is not None:
        folder = clients[name]["folder"]
        what = f"the global adapter ({name}'s model)" if folder == "global" else f"{name}'s adapter"
        return run_dir / "adapters" / folder, what
    some = ", ".join(list(clients)[:5])
    raise ConfigError("--client", client, f"no such client in this run; its clients: {some}...")


def sample(
    run_dir: Path,
    prompt: str,
    client: str | None = None,
    max_new_tokens: int = 50,
    seed: int = 0,
    temperature: float = 0.0,
) -> tuple[str, str]:
    """(the generated text after ``prompt``, which adapter wrote it)."""
    import peft
    import torch

    if max_new_tokens < 1:
        raise ConfigError("--max-new-tokens", max_new_tokens, "must be >= 1")
    if temperature < 0:
        raise ConfigError("--temperature", temperature, "must be >= 0 (0: greedy)")
    config = read_run(run_dir)
    folder, what = adapter_folder(run_dir, client)
    args = (config.get("model") or {}).get("args") or {}
    source = str(args.get("source", SMOLLM2))
    tokenizer = load_tokenizer(
        "data.tokenizer", (config.get("data") or {}).get("tokenizer") or source
    )
    base = load_frozen_base("model.args.source", source, str(args.get("dtype", "float32")))
    model = peft.PeftModel.from_pretrained(shared_copy(base), str(folder)).eval()
    ids = prompt_ids(tokenizer, prompt, config)
    torch.manual_seed(seed)
    greedy = temperature == 0
    settings: dict[str, Any] = {"do_sample": not greedy}
    if not greedy:
        settings["temperature"] = temperature
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            **settings,
        )
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True), what


def prompt_ids(tokenizer: Any, prompt: str, config: dict[str, Any]) -> Any:
    """The prompt's token ids (1, T): written as the run's instruction data was (the chat
    template, or Alpaca's: ``fedsim.data.hf.instruct.instruction_text``) where it had a
    prompt column."""
    import torch

    if (config.get("data") or {}).get("prompt_column"):
        from fedsim.data.hf.instruct import instruction_text  # imports torch

        head, _ = instruction_text(tokenizer, prompt)
        ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    if not ids:
        raise ConfigError("--prompt", prompt, "gives no token: write some text")
    return torch.tensor([ids], dtype=torch.long)


def cmd_sample(args: argparse.Namespace) -> int:
    """Print the continuation of ``--prompt`` (the adapter used on stderr)."""
    text, what = sample(
        Path(args.run_dir),
        args.prompt,
        args.client,
        args.max_new_tokens,
        args.seed,
        args.temperature,
    )
    print(f"fedsim: sampling with {what}", file=sys.stderr)
    print(text)
    return 0


def add_sample_command(sub: Any) -> None:
    """The ``sample`` subcommand on the CLI's subparsers."""
    parser = sub.add_parser(
        "sample",
        help="text from a language-model run's adapter (a client's or the global)",
        description="Continue --prompt with the base model and an adapter the run wrote "
        "(RUN_FOLDER/adapters/, loaded by peft): a client's with --client, else the global "
        "one. Greedy unless --temperature > 0; seeded.",
    )
    parser.add_argument("run_dir", metavar="RUN_FOLDER", help="e.g. runs/shakespeare-lora")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--client", default=None, help="a client's name or id (default: global)")
    parser.add_argument("--max-new-tokens", type=int, default=50, help="tokens to generate")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sampling")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.set_defaults(func=cmd_sample, overrides=[])
