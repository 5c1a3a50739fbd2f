"""The run's tokenizer as a `transformers` fast tokenizer: tokenizer.json, tokenizer_config.json and
special_tokens_map.json, written as plain files so that every supported `transformers` version reads the same thing.

The ids are the suite's: a text corpus's own WordPiece tokenizer (tokenizer.json beside config.json), or, on the
embedded language, one token per word, spelled as synthetic:text spells it (word w is id w + 4). T5's sentinels are
added on top as special tokens, <extra_id_0> the last id, so len(tokenizer) is the model's vocabulary. The
post-processor lays inputs out as the suite's downstream tasks do: a text "a [EOS]" and a pair "a [EOS] b [EOS]"
(segments 0 and 1); on the embedded language a window as it is and a pair "[BOS] a [EOS] b [EOS]".

A causal export's BOS is [EOS], the token that starts every document in the suite's packed windows, and its
tokenizer puts it before a text ("[EOS] a") instead of after: lm-evaluation-harness and `generate` read a tokenized
text as a prompt, which a trailing [EOS] would end (lm-eval splits a context from its continuation by encoding
both, which only a prefix survives). The embedded language's windows start at a sequence's start with no token
before it, so there a text stays as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

from bench.data.corpus import speller
from bench.yardsticks.examples import TaskContext
from objectives import SPECIAL_TOKENS

PAD, MASK, BOS, EOS, UNK = SPECIAL_TOKENS


def sentinel_name(index: int) -> str:
    return f"<extra_id_{index}>"


def base_tokenizer(context: TaskContext) -> Tokenizer:
    """The run's own tokenizer (a copy), or the embedded language's words as a word-level tokenizer."""
    if context.tokenizer is not None:
        return Tokenizer.from_str(context.tokenizer.to_str())
    vocab, spell = context.vocab, speller(context.vocab.num_ordinary)
    words = {token: index for index, token in enumerate(SPECIAL_TOKENS[:vocab.first_ordinary])}
    words.update({spell(word): vocab.first_ordinary + word for word in range(vocab.num_ordinary)})
    # the embedded language has no [UNK] id (every word it makes is known): a word from elsewhere is read as a word
    # the model cannot see, [MASK], rather than raising on the first one
    tokenizer = Tokenizer(models.WordLevel(words, unk_token=MASK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS[:vocab.first_ordinary]))
    return tokenizer


def layout(embedded: bool, causal: bool) -> processors.TemplateProcessing:
    """How a single text and a pair are laid out (see the module's docstring)."""
    if embedded:
        single, pair = "$A:0", f"{BOS}:0 $A:0 {EOS}:0 $B:1 {EOS}:1"
    elif causal:
        single, pair = f"{EOS}:0 $A:0", f"{EOS}:0 $A:0 {EOS}:0 $B:1 {EOS}:1"
    else:
        single, pair = f"$A:0 {EOS}:0", f"$A:0 {EOS}:0 $B:1 {EOS}:1"
    specials = [(token, SPECIAL_TOKENS.index(token)) for token in (BOS, EOS) if token in single + pair]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def export_tokenizer(context: TaskContext, causal: bool) -> Tokenizer:
    """The run's tokenizer with its sentinels and the suite's layout of inputs."""
    tokenizer, vocab = base_tokenizer(context), context.vocab
    if tokenizer.get_vocab_size() != vocab.end_ordinary:
        raise ValueError(f"tokenizer of {tokenizer.get_vocab_size()} ids for a vocabulary of {vocab.end_ordinary}")
    tokenizer.add_special_tokens([AddedToken(sentinel_name(i), special=True, normalized=False)
                                  for i in reversed(range(vocab.num_sentinels))])
    tokenizer.post_processor = layout(context.tokenizer is None, causal)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenizer_config(context: TaskContext, causal: bool, segments: bool) -> dict:
    """tokenizer_config.json: the named special tokens, the sentinels, the window, the inputs the model reads."""
    vocab = context.vocab
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context.seq_len,
              "padding_side": "right", "clean_up_tokenization_spaces": False,
              "pad_token": PAD, "mask_token": MASK, "bos_token": EOS if causal else BOS, "eos_token": EOS,
              "additional_special_tokens": [sentinel_name(i) for i in range(vocab.num_sentinels)],
              "model_input_names": ["input_ids", "attention_mask"] + (["token_type_ids"] if segments else [])}
    if vocab.first_ordinary > SPECIAL_TOKENS.index(UNK):
        config["unk_token"] = UNK
    return config


def write_tokenizer(folder: Path, context: TaskContext, causal: bool, segments: bool) -> None:
    """The three files a `transformers` fast tokenizer loads from."""
    export_tokenizer(context, causal).save(str(folder / "tokenizer.json"))
    config = tokenizer_config(context, causal, segments)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    named = {key: value for key, value in config.items() if key.endswith("_token") or key.endswith("_tokens")}
    (folder / "special_tokens_map.json").write_text(json.dumps(named, indent=2) + "\n")

