"""Configuration of an objective-bench backbone exported for `transformers` (loaded with trust_remote_code=True).

Shipped beside the weights by `python -m bench.export`; it imports nothing of the suite, so the folder works alone.
"""

from transformers import PretrainedConfig

ATTENTION_MODES = ("bidirectional", "causal", "prefix")
POSITIONS = ("rope", "learned")
POOLINGS = ("mean", "first", "last")


class ObjectiveBenchConfig(PretrainedConfig):
    """The suite's backbone: pre-norm blocks (LayerNorm with biases, exact GELU MLP), a final LayerNorm, RoPE on
    interleaved pairs (or learned positions), logits from the token embedding matrix.

    `attention` is the mode the objective trained in; "prefix" reads positions below `prefix_len` bidirectionally.
    `embedding_size` differs from `hidden_size` for ELECTRA's generator (a projection after the embeddings and a
    dense-GELU-LayerNorm transform before the logits); `type_vocab_size` is 2 for a sentence-pair objective;
    `pretraining_head` is "electra" (replaced-token detection) or "pair" (NSP/SOP) for AutoModelForPreTraining;
    `classifier_pooling` is how AutoModelForSequenceClassification reads a sequence, as the suite's fine-tuning does.
    """

    model_type = "objective_bench"

    def __init__(self, vocab_size: int = 232, hidden_size: int = 64, num_hidden_layers: int = 2,
                 num_attention_heads: int = 2, intermediate_size: int = 256, max_position_embeddings: int = 64,
                 layer_norm_eps: float = 1e-5, hidden_dropout_prob: float = 0.0, hidden_act: str = "gelu",
                 position_embedding_type: str = "rope", rope_base: float = 10000.0,
                 attention: str = "bidirectional", embedding_size: int | None = None, type_vocab_size: int = 0,
                 mlm_transform: bool = False, pretraining_head: str = "", classifier_pooling: str = "mean",
                 initializer_range: float = 0.02, **kwargs) -> None:
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        if position_embedding_type not in POSITIONS:
            raise ValueError(f"position_embedding_type must be one of {POSITIONS}, got {position_embedding_type!r}")
        if classifier_pooling not in POOLINGS:
            raise ValueError(f"classifier_pooling must be one of {POOLINGS}, got {classifier_pooling!r}")
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.num_attention_heads, self.intermediate_size = num_attention_heads, intermediate_size
        self.max_position_embeddings, self.layer_norm_eps = max_position_embeddings, layer_norm_eps
        self.hidden_dropout_prob, self.hidden_act = hidden_dropout_prob, hidden_act
        self.position_embedding_type, self.rope_base, self.attention = position_embedding_type, rope_base, attention
        self.embedding_size = embedding_size if embedding_size is not None else hidden_size
        self.type_vocab_size, self.mlm_transform = type_vocab_size, mlm_transform
        self.pretraining_head, self.classifier_pooling = pretraining_head, classifier_pooling
        self.initializer_range = initializer_range
        kwargs.setdefault("tie_word_embeddings", False)  # logits use the embedding matrix itself: nothing to tie
        super().__init__(**kwargs)
