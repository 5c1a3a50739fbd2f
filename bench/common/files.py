"""Files that survive interruption: whole files are written to a temporary name and renamed into place, and result
lines are appended and flushed one at a time, so a reader never sees half of anything."""

from __future__ import annotations

import base64
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def write_atomic(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)


def json_safe(obj: Any) -> Any:
    """The same structure with every NaN or infinite float replaced by None: bare NaN is not JSON, and a browser's
    or Node's JSON.parse rejects a file that holds it. A missing number is null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: json_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(value) for value in obj]
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text of `obj`; allow_nan=False, so a NaN that slipped past json_safe fails loudly, never written."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False)


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, dumps(obj, indent=2) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def append_jsonl(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(dumps(obj) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_jsonl(path: Path) -> list[Any]:
    """Complete lines only: a line cut short by a crash is dropped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def pack_counts(counts: Any) -> str:
    """Small non-negative integers (a test set's hits per example) as base64 text: a tenth of a JSON list's size."""
    array = np.asarray(counts, dtype=np.int64)
    if array.size and (array.min() < 0 or array.max() >= 1 << 16):
        raise ValueError("pack_counts stores integers in [0, 65536)")
    dtype = np.uint8 if not array.size or array.max() < 256 else np.uint16
    return ("" if dtype is np.uint8 else "u16:") + base64.b64encode(array.astype(dtype).tobytes()).decode("ascii")


def unpack_counts(text: str) -> np.ndarray:
    wide = text.startswith("u16:")
    raw = base64.b64decode(text.removeprefix("u16:"))
    return np.frombuffer(raw, dtype=np.uint16 if wide else np.uint8).astype(np.int64)
