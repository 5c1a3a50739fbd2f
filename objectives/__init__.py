"""Pretraining objectives on the shared backbone, built from spec strings such as "mlm:rate=0.4,mask=0.9,random=0".

A spec is NAME or NAME:KEY=VALUE,KEY=VALUE (see objectives.options.parse_options); every mistake raises ConfigError
with a one-line message naming it.
"""

from __future__ import annotations

from backbone import Backbone, ConfigError
from objectives.base import IGNORE, NUM_SENTINELS, SIGNALS, SPECIAL_TOKENS, Corrupted, FloorSpec, Objective, Output, Vocab
from objectives.options import Options, parse_options, split_specs
from objectives.causal import CausalLM
from objectives.electra import Electra
from objectives.mlm import MaskedLM
from objectives.schedule import ObjectiveSchedule, build_schedule, split_schedule
from objectives.span import SpanCorruption

REGISTRY: dict[str, type[Objective]] = {cls.name: cls for cls in (MaskedLM, CausalLM, Electra, SpanCorruption)}


def parse_spec(spec: str) -> tuple[type[Objective], Options]:
    """"mlm:rate=0.4" -> (MaskedLM, MLMOptions(rate=0.4)), validated."""
    name, _, option_text = spec.strip().partition(":")
    if name not in REGISTRY:
        raise ConfigError(f"unknown objective {name!r} in {spec!r}; choose one of {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    options = parse_options(name, option_text, cls.options_class)
    options.validate()
    return cls, options


def build_objective(spec: str, backbone: Backbone, vocab: Vocab) -> Objective:
    """The objective `spec` names on `backbone`: a registered one, or a schedule of them ("ar>mlm@0.25")."""
    if ">" in spec:
        return build_schedule(spec.strip(), backbone, vocab, build_objective)
    cls, options = parse_spec(spec)
    return cls(backbone, vocab, options)


def parse_objective_list(text: str) -> list[str]:
    """Split "mlm,ar,mlm:rate=0.4,mask=1.0" into specs (objectives.options.split_specs) and check each."""
    specs = split_specs(text)
    if not specs:
        raise ConfigError("no objectives given")
    for spec in specs:
        for piece in split_schedule(spec)[0]:  # a plain spec is its one piece
            parse_spec(piece)
    return specs


__all__ = ["CausalLM", "Corrupted", "Electra", "FloorSpec", "IGNORE", "MaskedLM", "NUM_SENTINELS", "Objective",
           "ObjectiveSchedule", "Options", "Output", "REGISTRY", "SIGNALS", "SPECIAL_TOKENS", "SpanCorruption", "Vocab",
           "build_objective", "parse_objective_list", "parse_options", "parse_spec", "split_specs"]
