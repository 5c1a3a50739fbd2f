"""Writing an export: every folder is written inside a temporary sibling of the target, which is renamed into place
only once all of it is there, so a failure leaves nothing behind."""

from __future__ import annotations

import json
import shutil
import tempfile
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from backbone import ConfigError
from bench.export.mapping import Folder
from bench.export.native import CODE, CODE_FILES
from bench.export.sentence import write_sentence_files
from bench.export.tokenizer import write_tokenizer
from bench.yardsticks.examples import TaskContext

EXTRA = "pip install 'objective-bench[export]'"


def require(package: str) -> ModuleType:
    """An optional package of the export extra, or one ConfigError line that says how to install it."""
    try:
        return import_module(package)
    except ImportError:
        raise ConfigError(f"bench.export needs {package.split('.')[0]}, which is not installed: {EXTRA}") from None


def check_target(out: Path) -> None:
    """The target must be new (or an empty folder): an export never mixes with older files."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} already exists and is not an empty folder; choose a new --out")


def write_exports(targets: dict[Path, list[Folder]], context_of: dict[Path, TaskContext],
                  provenance_of: dict[Path, dict]) -> None:
    """Write each target's folders; all targets are checked first, and each one appears whole or not at all."""
    for out in targets:
        check_target(out)
    save_file = require("safetensors.torch").save_file
    for out, folders in targets.items():
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            for folder in folders:
                write_folder(temporary / folder.name, folder, context_of[out], provenance_of[out], save_file)
            if out.exists():
                out.rmdir()  # empty, as check_target found it
            temporary.rename(out)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)


def write_folder(folder: Path, export: Folder, context: TaskContext, provenance: dict,
                 save_file: Callable[..., None]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {**export.config, "objective_bench": provenance}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # safetensors holds no shared or strided storage: each tensor its own contiguous float32 copy
    tensors = {name: tensor.detach().to("cpu", torch.float32).contiguous().clone()
               for name, tensor in export.tensors.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if export.shipped:
        for name in CODE_FILES:
            shutil.copyfile(CODE / name, folder / name)
    write_tokenizer(folder, context, export.causal, export.segments)
    if export.generates:
        generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
        generation["use_cache"] = not export.shipped  # the shipped family has no KV cache
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    if not export.name:
        hidden = config.get("hidden_size", config.get("n_embd"))
        write_sentence_files(folder, hidden, context.seq_len, export.causal)
