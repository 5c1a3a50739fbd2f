"""Pretraining objectives on the shared backbone, built from spec strings such as "mlm:rate=0.4,mask=1.0".

A spec is NAME or NAME:KEY=VALUE,KEY=VALUE. Values are converted to the type of the option's default; every
mistake raises ConfigError with a one-line message naming it.
"""

from __future__ import annotations

import math
from dataclasses import fields

from backbone import Backbone, ConfigError
from objectives.base import IGNORE, Corrupted, Objective, Options, Output, Vocab
from objectives.causal import CausalLM
from objectives.electra import Electra
from objectives.mlm import MaskedLM
from objectives.span import SpanCorruption

REGISTRY: dict[str, type[Objective]] = {cls.name: cls for cls in (MaskedLM, CausalLM, Electra, SpanCorruption)}

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _convert(objective: str, key: str, text: str, default: object) -> object:
    try:
        if isinstance(default, bool):
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError
            return text.lower() in _TRUE
        value = type(default)(text)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError
        return value
    except ValueError:
        raise ConfigError(f"{objective} option {key}={text!r} is not a valid {type(default).__name__}") from None


def parse_spec(spec: str) -> tuple[type[Objective], Options]:
    """"mlm:rate=0.4" -> (MaskedLM, MLMOptions(rate=0.4)), validated."""
    name, _, option_text = spec.strip().partition(":")
    if name not in REGISTRY:
        raise ConfigError(f"unknown objective {name!r} in {spec!r}; choose one of {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    defaults = {f.name: f.default for f in fields(cls.options_class)}
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in option_text.split(","))):
        key, equals, text = item.partition("=")
        key = key.strip()
        if not equals:
            raise ConfigError(f"{name} option {item!r} needs the form key=value")
        if key not in defaults:
            known = ", ".join(defaults) or "none"
            raise ConfigError(f"unknown {name} option {key!r}; known options: {known}")
        if key in values:
            raise ConfigError(f"{name} option {key!r} is given twice")
        values[key] = _convert(name, key, text.strip(), defaults[key])
    options = cls.options_class(**values)
    options.validate()
    return cls, options


def build_objective(spec: str, backbone: Backbone, vocab: Vocab) -> Objective:
    cls, options = parse_spec(spec)
    return cls(backbone, vocab, options)


def parse_objective_list(text: str) -> list[str]:
    """Split "mlm,ar,mlm:rate=0.4,mask=1.0" into specs: a piece with "=" and no ":" continues the previous spec."""
    specs: list[str] = []
    for piece in (part.strip() for part in text.split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece and specs:
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    if not specs:
        raise ConfigError("no objectives given")
    for spec in specs:
        parse_spec(spec)
    return specs


__all__ = ["IGNORE", "REGISTRY", "CausalLM", "Corrupted", "Electra", "MaskedLM", "Objective", "Options", "Output",
           "SpanCorruption", "Vocab", "build_objective", "parse_objective_list", "parse_spec"]
