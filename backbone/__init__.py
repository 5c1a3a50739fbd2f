"""One transformer backbone shared by every objective."""

from backbone.flops import Flops, measure_flops
from backbone.kv_cache import KVCache
from backbone.model import ATTENTION_MODES, Backbone, Transformer
from backbone.sizes import MODEL_SIZES, BackboneConfig, ConfigError, preset, resolve_model

__all__ = ["ATTENTION_MODES", "Backbone", "BackboneConfig", "ConfigError", "Flops", "KVCache", "MODEL_SIZES",
           "Transformer", "measure_flops", "preset", "resolve_model"]
