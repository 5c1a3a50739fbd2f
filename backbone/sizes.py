"""Backbone configuration and size presets.

One dataclass describes the transformer every objective shares; presets name the sizes the suite is run at.
"""

from __future__ import annotations

from dataclasses import dataclass


class ConfigError(ValueError):
    """A user-facing configuration mistake. Its message is one line that names the problem; CLIs print it and exit 2."""


POSITIONS = ("rope", "learned")


@dataclass(frozen=True)
class BackboneConfig:
    vocab_size: int
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    d_ff: int | None = None  # None -> 4 * d_model, as in BERT and GPT-2
    max_seq_len: int = 512
    positions: str = "rope"
    dropout: float = 0.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"backbone {name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ConfigError(f"backbone d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.positions == "rope" and (self.d_model // self.n_head) % 2:
            raise ConfigError(f"rope needs an even head dimension, got {self.d_model // self.n_head}")
        if self.positions not in POSITIONS:
            raise ConfigError(f"unknown positions {self.positions!r}; choose one of {', '.join(POSITIONS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


# tiny: unit tests; mini: the default comparison on the embedded language (2 CPU cores); small: CPU comparisons on
# text (~4 layers x 256, like ELECTRA-Small's width); base: BERT-base, for GPUs.
MODEL_SIZES: dict[str, dict] = {
    "tiny": dict(n_layer=2, n_head=2, d_model=32),
    "mini": dict(n_layer=2, n_head=2, d_model=64),
    "small": dict(n_layer=4, n_head=4, d_model=256),
    "base": dict(n_layer=12, n_head=12, d_model=768),
}


SHAPE_FIELDS = {"n_layer": int, "n_head": int, "d_model": int, "d_ff": int, "positions": str, "dropout": float}


def resolve_model(text: str, vocab_size: int, max_seq_len: int = 512) -> BackboneConfig:
    """A model given as a preset name with optional overrides, "small" or "small:d_model=128,n_layer=2", resolved
    to its full shape. Researchers sweep widths and depths; a mistake is one ConfigError line that names it."""
    name, _, option_text = text.strip().partition(":")
    if name not in MODEL_SIZES:
        raise ConfigError(f"unknown --model {name!r}; choose one of {', '.join(MODEL_SIZES)}, optionally with "
                          "overrides such as small:d_model=128,n_layer=2")
    overrides: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in option_text.split(","))):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or key not in SHAPE_FIELDS:
            raise ConfigError(f"--model {text!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(SHAPE_FIELDS)}")
        if key in overrides:
            raise ConfigError(f"--model {text!r}: {key} is given twice")
        try:
            overrides[key] = SHAPE_FIELDS[key](value)
        except ValueError:
            raise ConfigError(f"--model {text!r}: {key}={value!r} is not a valid "
                              f"{SHAPE_FIELDS[key].__name__}") from None
    return preset(name, vocab_size, max_seq_len, **overrides)


def preset(name: str, vocab_size: int, max_seq_len: int = 512, **overrides) -> BackboneConfig:
    """The named size preset for a vocabulary and maximum length; `overrides` replace single fields."""
    if name not in MODEL_SIZES:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(MODEL_SIZES)}")
    return BackboneConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, **{**MODEL_SIZES[name], **overrides})
