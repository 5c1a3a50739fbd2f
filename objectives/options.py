"""Objective options as written on the command line ("mlm:rate=0.4,mask=1.0"): parsed into each objective's frozen
dataclass, checked, and split out of a comma-separated list of specs."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TypeVar

from backbone import ConfigError


@dataclass(frozen=True)
class Options:
    """Base of each objective's options; subclasses add fields with defaults and override `validate`."""

    def validate(self) -> None:
        pass


def check_fraction(name: str, value: float, *, allow_zero: bool = True) -> None:
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        bound = "[0, 1]" if allow_zero else "(0, 1]"
        raise ConfigError(f"{name} must be in {bound}, got {value}")


def check_split(objective: str, **shares: float) -> None:
    for name, value in shares.items():
        check_fraction(f"{objective} {name}", value)
    if abs(sum(shares.values()) - 1.0) > 1e-9:
        listed = " + ".join(f"{name} {value:g}" for name, value in shares.items())
        raise ConfigError(f"{objective} split must sum to 1, got {listed} = {sum(shares.values()):g}")


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
OptionsT = TypeVar("OptionsT")


def _convert(label: str, key: str, text: str, default: object) -> object:
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
        raise ConfigError(f"{label} option {key}={text!r} is not a valid {type(default).__name__}") from None


def split_specs(text: str) -> list[str]:
    """Split "mlm,ar,mlm:rate=0.4,mask=1.0" into specs: a piece with "=" and no ":" continues the previous spec (so a
    list of specs and each spec's options share one comma-separated string)."""
    specs: list[str] = []
    for piece in (part.strip() for part in text.split(",")):
        if not piece:
            continue
        if "=" in piece and ":" not in piece and specs:
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return specs


def parse_options(label: str, text: str, options_class: type[OptionsT]) -> OptionsT:
    """"rate=0.4,mask=1.0" -> options_class(rate=0.4, mask=1.0). Each value is converted to the type of the field's
    default; an unknown key, a repeated key or a value of the wrong type raises ConfigError naming it."""
    defaults = {f.name: f.default for f in fields(options_class)}
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals:
            raise ConfigError(f"{label} option {item!r} needs the form key=value")
        if key not in defaults:
            raise ConfigError(f"unknown {label} option {key!r}; known options: {', '.join(defaults) or 'none'}")
        if key in values:
            raise ConfigError(f"{label} option {key!r} is given twice")
        values[key] = _convert(label, key, value.strip(), defaults[key])
    return options_class(**values)
