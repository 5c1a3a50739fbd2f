import pytest
import torch
from tests.helpers import VOCAB, random_tokens

from backbone import Backbone, BackboneConfig, ConfigError, measure_flops, preset
from backbone.flops import TILE, attention_entries, transformer_flops
from backbone.model import attention_mask


def model(positions: str = "rope", max_seq_len: int = 32) -> Backbone:
    return Backbone(preset("tiny", VOCAB.size, max_seq_len=max_seq_len, positions=positions)).eval()


def perturbed(tokens: torch.Tensor, position: int) -> torch.Tensor:
    changed = tokens.clone()
    changed[:, position] = VOCAB.first_ordinary + (changed[:, position] - VOCAB.first_ordinary + 1) % VOCAB.num_ordinary
    return changed


def changed_positions(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(batch, T) bool: where the hidden states differ."""
    return ((a - b).abs().amax(-1) > 1e-6)


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_causal_outputs_ignore_later_tokens_and_bidirectional_do_not(positions):
    m, tokens = model(positions), random_tokens(2, 16)
    later = perturbed(tokens, 10)
    causal = changed_positions(m(tokens, attention="causal"), m(later, attention="causal"))
    assert not causal[:, :10].any() and causal[:, 10:].all()
    bidirectional = changed_positions(m(tokens, attention="bidirectional"), m(later, attention="bidirectional"))
    assert bidirectional.all()


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_prefix_mode_is_bidirectional_inside_the_prefix_and_causal_after(positions):
    m, tokens, prefix = model(positions), random_tokens(2, 16), 6
    run = lambda t: m(t, attention="prefix", prefix_len=prefix)  # noqa: E731
    # the last prefix token is seen by every position, the first one included
    assert changed_positions(run(tokens), run(perturbed(tokens, prefix - 1))).all()
    # the first token after the prefix is seen only by itself and later positions
    after = changed_positions(run(tokens), run(perturbed(tokens, prefix)))
    assert not after[:, :prefix].any() and after[:, prefix:].all()
    # prefix 0 behaves as causal, prefix T as bidirectional
    assert torch.allclose(m(tokens, attention="prefix", prefix_len=0), m(tokens, attention="causal"), atol=1e-6)
    assert torch.allclose(m(tokens, attention="prefix", prefix_len=16), m(tokens, attention="bidirectional"),
                          atol=1e-6)


def test_prefix_length_per_sequence():
    m, tokens = model(), random_tokens(2, 16)
    both = m(tokens, attention="prefix", prefix_len=torch.tensor([3, 9]))
    assert torch.allclose(both[0], m(tokens[:1], attention="prefix", prefix_len=3)[0], atol=1e-6)
    assert torch.allclose(both[1], m(tokens[1:], attention="prefix", prefix_len=9)[0], atol=1e-6)


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_kv_cache_incremental_decoding_matches_full_forward(positions):
    m, tokens = model(positions), random_tokens(3, 20)
    full = m.logits(m(tokens, attention="causal"))
    cache = m.new_kv_cache(3)
    pieces = [m.logits(m(tokens[:, :7], attention="causal", kv_cache=cache))]  # a prompt, then a chunk, then 1 by 1
    pieces.append(m.logits(m(tokens[:, 7:12], attention="causal", kv_cache=cache)))
    for t in range(12, 20):
        pieces.append(m.logits(m(tokens[:, t:t + 1], attention="causal", kv_cache=cache)))
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_is_only_for_causal_attention():
    m = model()
    with pytest.raises(ValueError, match="causal"):
        m(random_tokens(1, 4), attention="bidirectional", kv_cache=m.new_kv_cache(1))


def test_selected_rows_project_like_all_rows():
    m, tokens = model(), random_tokens(2, 8)
    hidden = m(tokens, attention="bidirectional")
    torch.testing.assert_close(m.logits(hidden[:, [1, 5]]), m.logits(hidden)[:, [1, 5]])


def test_transformer_flops_by_hand():
    # one layer, d = 4, d_ff = 16, batch 1, T = 2: dense 2·2·4·(12 + 4 + 32) = 768; attention 2·2·1·2·2·4 = 64
    flops = transformer_flops(1, 2, 4, 16, 1)
    assert (flops.dense, flops.attention) == (768, 64)
    assert flops.training_step == 3 * 768 + 64 * 7 // 2


def visible_blocks(mask: torch.Tensor, tile: int) -> int:
    """Brute force: the entries of the tile × tile blocks of a (T, T) visibility mask with any visible entry."""
    seq_len, entries = mask.shape[0], 0
    for rows in range(0, seq_len, tile):
        for cols in range(0, seq_len, tile):
            block = mask[rows:rows + tile, cols:cols + tile]
            entries += block.numel() if block.any() else 0
    return entries


@pytest.mark.parametrize("seq_len", [1, 64, 128, 129, 300, 512, 1000])
def test_executed_attention_charges_the_blocks_a_tiled_kernel_computes(seq_len):
    assert attention_entries(seq_len, "causal") == seq_len ** 2  # dense: the whole matrix, whatever the mask
    causal = attention_mask("prefix", seq_len, 0, 0, torch.device("cpu"))[0]  # an empty prefix is the causal mask
    assert attention_entries(seq_len, "causal", convention="executed") == visible_blocks(causal, TILE)
    # only causal attention reaches SDPA as is_causal, which its flash kernels skip blocks of; a prefix LM's mask is a
    # tensor, whose every block the kernels compute: charged as bidirectional
    assert attention_mask("causal", seq_len, 0, None, torch.device("cpu")) == (None, True)
    prefix_mask, is_causal = attention_mask("prefix", seq_len, 0, max(1, seq_len // 3), torch.device("cpu"))
    assert prefix_mask is not None and not is_causal
    assert attention_entries(seq_len, "prefix", "executed") == seq_len ** 2
    assert attention_entries(seq_len, "bidirectional", convention="executed") == seq_len ** 2
    if seq_len <= TILE:  # one tile: nothing to skip
        assert attention_entries(seq_len, "causal", convention="executed") == seq_len ** 2


def test_executed_causal_attention_by_hand_and_through_the_backbone():
    # T = 512 is 4 tiles a side: 4 + 3 + 2 + 1 = 10 of the 16 blocks
    assert attention_entries(512, "causal", convention="executed") * 16 == 10 * 512 ** 2
    backbone = Backbone(preset("tiny", VOCAB.size, max_seq_len=512))
    dense = backbone.flops(2, 512, 7, "causal")
    backbone.flops_convention = "executed"
    executed = backbone.flops(2, 512, 7, "causal")
    assert executed.dense == dense.dense and executed.attention * 16 == dense.attention * 10
    assert backbone.flops(2, 512, 7) == dense  # bidirectional: the same either way
    with pytest.raises(ValueError, match="FLOP convention"):
        attention_entries(8, "causal", convention="sparse")


def test_cpu_attention_is_counted_by_the_flop_counter():
    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    # forward: 2 products of 2·T·T·head_dim per (batch, head); backward: 5 such products (scores recomputed)
    per_product = 2 * 2 * 3 * 16 * 16 * 8
    assert measure_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)) == 2 * per_product
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert measure_flops(lambda: out.sum().backward()) == 5 * per_product


def test_bad_configs_raise_config_errors():
    with pytest.raises(ConfigError, match="divisible"):
        BackboneConfig(vocab_size=10, d_model=30, n_head=4)
    with pytest.raises(ConfigError, match="unknown model preset"):
        preset("huge", 10)
    with pytest.raises(ConfigError, match="positions"):
        BackboneConfig(vocab_size=10, positions="alibi")


def test_preset_override_keeps_d_ff_consistent():
    assert preset("tiny", 10, d_model=64).d_ff == 256


@pytest.mark.parametrize("attention", ["bidirectional", "causal", "prefix"])
def test_activation_checkpointing_gives_the_same_gradients(attention):
    # dropout on: the recomputed forward must draw the same masks, or the gradients would differ
    config = preset("tiny", VOCAB.size, max_seq_len=16, dropout=0.1)
    tokens, prefix = random_tokens(3, 16), 6 if attention == "prefix" else None
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        m = Backbone(config).train()
        m.transformer.activation_checkpointing = checkpointing
        torch.manual_seed(1)
        m.logits(m(tokens, attention=attention, prefix_len=prefix)).logsumexp(-1).mean().backward()
        gradients.append({name: p.grad for name, p in m.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys()
    for name, grad in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], grad, rtol=0, atol=0, msg=name)


def saved_values(m: Backbone, tokens: torch.Tensor) -> int:
    """Values autograd keeps for the backward pass of the transformer stack, counted as they are saved (each
    storage once)."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes() // tensor.element_size()
        return tensor

    embedded = m.embed(tokens).detach().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        m.transformer(embedded, attention="bidirectional")
    parameters = {p.untyped_storage().data_ptr() for p in m.parameters()}
    return sum(n for pointer, n in storages.items() if pointer not in parameters)


def test_the_activation_estimate_follows_what_autograd_keeps():
    config = preset("tiny", VOCAB.size, max_seq_len=64, n_layer=4)
    m, tokens = Backbone(config).train(), random_tokens(8, 64)
    plain = saved_values(m, tokens)
    m.transformer.activation_checkpointing = True
    kept = saved_values(m, tokens)  # block inputs only; one block's inside is rebuilt during the backward pass
    estimate = m.transformer.activation_bytes(8, 64, 4, False) // 4  # fp32: values of 4 bytes
    estimate_checkpointed = m.transformer.activation_bytes(8, 64, 4, False, checkpointing=True) // 4
    assert 0.5 < plain / estimate < 1.5
    assert kept <= estimate_checkpointed < plain / 2
    # each block's input, and the final norm's input (with its per-token statistics)
    assert kept == pytest.approx(8 * 64 * config.d_model * (config.n_layer + 1), rel=0.05)


def test_rope_is_the_pairwise_rotation_bit_for_bit_in_fp32():
    from backbone.model import apply_rope, rope_tables

    x = torch.randn(2, 3, 16, 8, generator=torch.Generator().manual_seed(0))
    cos, sin = rope_tables(8, 16)
    # the reference: each (even, odd) pair rotated by angle t · base^(-2i/d), computed in float64 then rounded
    angles = torch.outer(torch.arange(16, dtype=torch.float64),
                         10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    c, s = angles.cos().float(), angles.sin().float()
    even, odd = x[..., 0::2], x[..., 1::2]
    expected = torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)
    assert torch.equal(apply_rope(x, cos, sin), expected)
    leaf, reference = x.clone().requires_grad_(), x.clone().requires_grad_()  # and the gradients, bit for bit
    grad = torch.randn_like(x)
    even, odd = reference[..., 0::2], reference[..., 1::2]
    pairwise = torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)
    assert torch.equal(torch.autograd.grad(apply_rope(leaf, cos, sin), leaf, grad)[0],
                       torch.autograd.grad(pairwise, reference, grad)[0])
    # norms are kept, and position 0 is not rotated
    torch.testing.assert_close(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(apply_rope(x, cos, sin)[:, :, 0], x[:, :, 0])
    # in bf16 the rotation stays in bf16
    assert apply_rope(x.bfloat16(), cos, sin).dtype == torch.bfloat16
