"""sentence-transformers' files, so that `SentenceTransformer(DIR)` embeds with the exported backbone: the
Transformer module over the folder itself and a pooling module, the mean over the tokens for an encoder, the last
token for a causal backbone (the only one that has read the whole text): each family's own read (the suite's
yardsticks mean-pool every backbone).
Models with shipped code need `trust_remote_code=True` (sentence-transformers refuses to take it from a file).
"""

from __future__ import annotations

import json
from pathlib import Path

POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")


def write_sentence_files(folder: Path, hidden_size: int, max_seq_length: int, causal: bool) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    chosen = "lasttoken" if causal else "mean_tokens"
    pooling = {"word_embedding_dimension": hidden_size,
               **{f"pooling_mode_{mode}": mode == chosen for mode in POOLING_MODES}, "include_prompt": True}
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    (folder / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False}, indent=2) + "\n")
