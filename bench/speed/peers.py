"""bench.perf's peers: what a researcher would otherwise use, the Hugging Face models of each objective at the suite's
width, depth, heads, vocabulary and length, dropout off, and a training step of each (the collator on the host, as
ours). They need `pip install -e ".[perf]"` (transformers), imported only when they are built.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from backbone import resolve_model
from bench.speed.timing import train_step
from objectives import SPECIAL_TOKENS


def hf_tokenizer(vocab_size: int):
    """A real fast tokenizer for the collator, built offline: specials at 0-4 as in the suite, then plain pieces."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    pieces = {**{token: i for i, token in enumerate(SPECIAL_TOKENS)},
              **{f"w{i}": i for i in range(len(SPECIAL_TOKENS), vocab_size)}}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(pieces, unk_token="[UNK]")),
                                   pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]", bos_token="[BOS]",
                                   eos_token="[EOS]")


def peer_models(model: str, vocab_size: int, seq_len: int):
    import transformers as hf
    c = resolve_model(model, vocab_size, max_seq_len=seq_len)
    common = dict(vocab_size=vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layer,
                  num_attention_heads=c.n_head, intermediate_size=c.d_ff, max_position_embeddings=seq_len,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert = hf.BertForMaskedLM(hf.BertConfig(**common))
    gpt2 = hf.GPT2LMHeadModel(hf.GPT2Config(vocab_size=vocab_size, n_embd=c.d_model, n_layer=c.n_layer,
                                            n_head=c.n_head, n_inner=c.d_ff, n_positions=seq_len, resid_pdrop=0.0,
                                            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=2, eos_token_id=3))
    generator_width = c.d_model // 4
    discriminator = hf.ElectraForPreTraining(hf.ElectraConfig(**common, embedding_size=c.d_model))
    generator = hf.ElectraForMaskedLM(hf.ElectraConfig(
        **{**common, "hidden_size": generator_width, "intermediate_size": 4 * generator_width,
           "num_attention_heads": max(1, generator_width // c.head_dim)}, embedding_size=c.d_model))
    generator.electra.embeddings = discriminator.electra.embeddings  # ELECTRA shares the embeddings
    for model_ in (bert, gpt2, discriminator, generator):
        model_.config._attn_implementation = "sdpa"
    return bert, gpt2, generator, discriminator


def peer_steps(model: str, vocab_size: int, tokens: torch.Tensor, dtype,
               device: torch.device = torch.device("cpu")) -> dict[str, tuple[Callable, Callable]]:
    """{name: (training step, one forward+backward for counting FLOPs)}; the collator runs on the host, as ours."""
    from transformers import DataCollatorForLanguageModeling
    torch.manual_seed(0)
    bert, gpt2, generator, discriminator = (peer.to(device) for peer in peer_models(model, vocab_size,
                                                                                      tokens.shape[1]))
    collator = DataCollatorForLanguageModeling(hf_tokenizer(vocab_size), mlm_probability=0.15)
    rows = [{"input_ids": row} for row in tokens.tolist()]
    tokens = tokens.to(device)

    def bert_loss() -> torch.Tensor:
        batch = collator(rows)
        return bert(input_ids=batch["input_ids"].to(device), labels=batch["labels"].to(device)).loss

    def gpt2_loss() -> torch.Tensor:
        return gpt2(input_ids=tokens, labels=tokens).loss

    electra_modules = torch.nn.ModuleList([generator, discriminator])

    def electra_loss() -> torch.Tensor:  # ELECTRA's recipe: 15 % chosen, 85 % [MASK], Gumbel sample, λ = 50
        chosen = torch.rand(tokens.shape, device=device) < 0.15
        masked = torch.where(chosen & (torch.rand(tokens.shape, device=device) < 0.85), 1, tokens)
        logits = generator(input_ids=masked).logits
        generator_loss = F.cross_entropy(logits[chosen], tokens[chosen])
        with torch.no_grad():
            noise = -torch.log(-torch.log(torch.rand(logits[chosen].shape, device=device).clamp_(1e-9, 1)))
            fake = tokens.clone()
            fake[chosen] = (logits[chosen].float() + noise).argmax(-1)
        labels = (fake != tokens).float()
        discriminator_logits = discriminator(input_ids=fake).logits
        return generator_loss + 50 * F.binary_cross_entropy_with_logits(discriminator_logits.float(), labels)

    steps = {}
    for name, module, loss_of in (("mlm", bert, bert_loss), ("ar", gpt2, gpt2_loss),
                                  ("electra", electra_modules, electra_loss)):
        steps[name] = (train_step(module, loss_of, dtype, device), lambda loss_of=loss_of: loss_of().backward())
    return steps

