"""What `vulture bench backbone objectives --min-confidence 60` reports that is used, by name, from outside our code:
callbacks that a library calls or a registry holds. Passing this file marks them used:

    vulture bench backbone objectives scripts/vulture_whitelist.py --min-confidence 60

Everything else vulture lists at that confidence is a dataclass field or a JSON field (read by name when a record is
written or loaded), never a function of ours.
"""

from bench.export.hf_model import backbone_objective_bench, modeling_objective_bench
from bench.yardsticks import metrics

# Hugging Face transformers calls these on a PreTrainedModel: weight initialisation, the input embeddings (resizing,
# tying), and generation's input preparation
backbone_objective_bench.ObjectiveBenchPreTrainedModel._init_weights
backbone_objective_bench.ObjectiveBenchModel.get_input_embeddings
backbone_objective_bench.ObjectiveBenchModel.set_input_embeddings
modeling_objective_bench.WithBackbone.get_input_embeddings
modeling_objective_bench.WithBackbone.set_input_embeddings
modeling_objective_bench.ObjectiveBenchForCausalLM.prepare_inputs_for_generation

# registered by @register in bench.yardsticks.metrics.METRICS, looked up by a task's metric name
metrics.binary_f1
metrics.macro_f1
metrics.mcc
metrics.span_f1
