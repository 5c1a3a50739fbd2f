import math

import pytest
import torch
from tests.helpers import VOCAB, random_tokens, tiny_objective

from backbone import ConfigError, measure_flops
from objectives import IGNORE, REGISTRY, Corrupted, Vocab, parse_objective_list, parse_spec
from objectives.masking import KEPT, MASKED, RANDOM, UNTOUCHED
from objectives.span import noise_and_spans, packed_lengths

BIG_VOCAB = Vocab(8192, num_sentinels=100)


def counted(spec: str, seq_len: int, batch_size: int = 32, seed: int = 0) -> float:
    """Supervised positions per sequence, counted on real corrupt() output."""
    objective = tiny_objective(spec, seq_len, BIG_VOCAB)
    batch = objective.corrupt(random_tokens(batch_size, seq_len, seed, BIG_VOCAB), torch.Generator().manual_seed(seed))
    return objective.counted_positions(batch) / batch_size


@pytest.mark.parametrize("seq_len, ar, mlm", [(512, 511, 77), (128, 127, 19)])
def test_supervised_positions_from_real_corruption(seq_len, ar, mlm):
    assert counted("ar", seq_len) == ar
    assert counted("mlm", seq_len) == mlm  # round(76.8) = 77, round(19.2) = 19
    assert counted("electra", seq_len) == seq_len + mlm  # discriminator everywhere + generator on the masked
    for spec in ("ar", "mlm", "electra", "span"):
        assert counted(spec, seq_len) == tiny_objective(spec, seq_len, BIG_VOCAB).expected_supervised_positions(seq_len)


def test_span_positions_at_512_by_hand():
    # raw 464: noise round(69.6) = 70, spans round(23.3) = 23; inputs 464 - 70 + 23 + 1 = 418, targets 70 + 23 + 1 = 94
    lengths = packed_lengths(512, 0.15, 3.0)
    assert (lengths.raw, lengths.noise, lengths.spans, lengths.inputs, lengths.targets, lengths.padding) == \
        (464, 70, 23, 418, 94, 0)
    assert counted("span", 512) == 94


def test_t5_counts_match_the_reference_helper():
    # T5's random_spans_helper (t5/data/preprocessors.py; docs/sources.md): 512 raw -> 77 noise in 26 spans (inputs
    # 462, targets 104); 568 raw -> 85 noise in 28 spans.
    assert noise_and_spans(512, 0.15, 3.0) == (77, 26)
    assert noise_and_spans(568, 0.15, 3.0) == (85, 28)
    # T5's random_spans_helper: 512 encoder inputs consume 568 raw tokens and give 114 targets; packed, that is
    # 626 positions, and the suite's own packing must find exactly those lengths
    lengths = packed_lengths(512 + 114, 0.15, 3.0)
    assert (lengths.raw, lengths.inputs, lengths.targets, lengths.padding) == (568, 512, 114, 0)
    assert noise_and_spans(3, 0.15, 3.0) == (1, 1)  # clipped to at least one noise token
    assert noise_and_spans(4, 0.99, 3.0)[0] == 3  # and at most raw - 1


@pytest.mark.parametrize("seq_len", range(6, 80))
def test_span_packing_fills_the_window(seq_len):
    lengths = packed_lengths(seq_len, 0.15, 3.0)
    assert lengths.inputs + lengths.targets + lengths.padding == seq_len and 0 <= lengths.padding <= 2
    assert packed_lengths(seq_len + 1, 0.15, 3.0).raw >= lengths.raw
    noise, spans = noise_and_spans(lengths.raw + 1, 0.15, 3.0)  # one more raw token would not fit
    assert lengths.raw + 1 + 2 * spans + 2 > seq_len


def test_bernoulli_rule_mean_and_spread():
    samples, seq_len, rate = 2000, 512, 0.15
    objective = tiny_objective("mlm:rule=bernoulli", seq_len, BIG_VOCAB)
    batch = objective.corrupt(random_tokens(samples, seq_len, 1, BIG_VOCAB), torch.Generator().manual_seed(1))
    per_sequence = (batch.targets != IGNORE).sum(1).double()
    expected_sd = math.sqrt(seq_len * rate * (1 - rate))  # 8.08
    assert abs(per_sequence.mean() - seq_len * rate) < 4 * expected_sd / math.sqrt(samples)
    assert abs(per_sequence.std() - expected_sd) < 0.1 * expected_sd
    assert per_sequence.unique().numel() > 10  # not a fixed count


def test_exact_rule_selects_distinct_positions_per_sequence():
    batch = tiny_objective("mlm", 128).corrupt(random_tokens(50, 128), torch.Generator().manual_seed(2))
    assert ((batch.targets != IGNORE).sum(1) == 19).all()
    selected = batch.targets != IGNORE
    assert selected.float().mean(0).min() > 0  # every position gets chosen sometimes


@pytest.mark.parametrize("spec, shares", [("mlm", (0.8, 0.1, 0.1)), ("mlm:mask=0.5,random=0.5,keep=0", (0.5, 0.5, 0)),
                                          ("electra", (0.85, 0.0, 0.15))])
def test_rewrite_split_frequencies_and_untouched_positions(spec, shares):
    objective = tiny_objective(spec, 256)
    tokens = random_tokens(400, 256, 3)
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(3))
    kind, selected = batch.info["rewrite"], batch.targets != IGNORE
    chosen = int(selected.sum())
    for share, value in zip(shares, (MASKED, RANDOM, KEPT)):
        frequency = int((kind == value).sum()) / chosen
        assert abs(frequency - share) < 4 * math.sqrt(max(share * (1 - share), 1e-12) / chosen) + 1e-12
    assert ((kind != UNTOUCHED) == selected).all()
    assert torch.equal(batch.targets[selected], tokens[selected])  # targets are the original tokens
    assert torch.equal(batch.inputs[~selected], tokens[~selected])  # unsupervised positions untouched
    assert (batch.inputs[kind == MASKED] == VOCAB.MASK).all()
    assert torch.equal(batch.inputs[kind == KEPT], tokens[kind == KEPT])
    random = batch.inputs[kind == RANDOM]
    assert ((random >= VOCAB.first_ordinary) & (random < VOCAB.end_ordinary)).all()  # never a special id


def test_random_replacements_cover_every_ordinary_token_and_nothing_else():
    batch = tiny_objective("mlm:mask=0,random=1,keep=0,rate=1").corrupt(random_tokens(200, 64),
                                                                         torch.Generator().manual_seed(4))
    drawn = batch.inputs.unique()
    assert torch.equal(drawn, torch.arange(VOCAB.first_ordinary, VOCAB.end_ordinary))


def reconstruct_span(inputs: list[int], targets: list[int], vocab: Vocab) -> list[int]:
    """Undo span corruption by reading the two sequences, independently of how corrupt() built them."""
    assert inputs[-1] == vocab.EOS and targets[-1] == vocab.EOS
    spans: dict[int, list[int]] = {}
    current = None
    for token in targets[:-1]:
        if token >= vocab.end_ordinary:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out: list[int] = []
    for token in inputs[:-1]:
        out.extend(spans.pop(token) if token >= vocab.end_ordinary else [token])
    assert not spans
    return out


@pytest.mark.parametrize("seq_len", [32, 64, 100])
def test_span_inputs_and_targets_reconstruct_the_original(seq_len):
    objective = tiny_objective("span", seq_len)
    tokens = random_tokens(20, seq_len, 5)
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(5))
    lengths = objective.lengths(seq_len)
    assert batch.prefix_len == lengths.inputs and batch.attention == "prefix"
    for row in range(20):
        packed = batch.inputs[row].tolist()
        inputs, targets = packed[:lengths.inputs], packed[lengths.inputs:lengths.inputs + lengths.targets]
        assert reconstruct_span(inputs, targets, VOCAB) == tokens[row, :lengths.raw].tolist()
        sentinels = [t for t in inputs if t >= VOCAB.end_ordinary]
        assert sentinels == [VOCAB.sentinel(i) for i in range(lengths.spans)]  # unique, in order
        assert packed[lengths.inputs + lengths.targets:] == [VOCAB.PAD] * lengths.padding
        # every target token is predicted from the position before it, nothing else is supervised
        supervised = (batch.targets[row] != IGNORE).nonzero().squeeze(1).tolist()
        assert supervised == list(range(lengths.inputs - 1, lengths.inputs + lengths.targets - 1))
        assert [batch.targets[row, p].item() for p in supervised] == targets


def test_span_noise_segments_alternate_starting_with_non_noise():
    batch = tiny_objective("span", 100).corrupt(random_tokens(50, 100), torch.Generator().manual_seed(6))
    noise = batch.info["noise"]
    lengths = packed_lengths(100, 0.15, 3.0)
    assert (noise.sum(1) == lengths.noise).all() and not noise[:, 0].any()
    starts = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0))
    assert (starts.sum(1) == lengths.spans).all()


def test_ar_targets_are_the_next_tokens():
    tokens = random_tokens(2, 10)
    batch = tiny_objective("ar").corrupt(tokens, torch.Generator())
    assert torch.equal(batch.targets[:, :-1], tokens[:, 1:]) and (batch.targets[:, -1] == IGNORE).all()
    assert torch.equal(batch.inputs, tokens)


@pytest.mark.parametrize("spec", ["ar", "mlm", "mlm:rule=bernoulli", "electra", "span"])
def test_same_seed_same_corruption(spec):
    objective, tokens = tiny_objective(spec), random_tokens(8, 64)
    a, b = (objective.corrupt(tokens, torch.Generator().manual_seed(7)) for _ in range(2))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    if spec != "ar":
        c = objective.corrupt(tokens, torch.Generator().manual_seed(8))
        assert not (torch.equal(a.inputs, c.inputs) and torch.equal(a.targets, c.targets))


def test_electra_labels_and_loss():
    # a 6-word vocabulary makes the generator's sample equal the original often, which must count as original
    vocab = Vocab.for_words(6, num_sentinels=0)
    objective = tiny_objective("electra:rate=0.5", 32, vocab)
    tokens = random_tokens(16, 32, 9, vocab)
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(9))
    output = objective(batch)
    fake, labels = output.tensors["discriminator_inputs"], output.tensors["discriminator_labels"]
    selected = batch.targets != IGNORE
    assert torch.equal(fake[~selected], tokens[~selected])  # only the generator's positions change
    assert torch.equal(labels, (fake != tokens).float())
    assert (labels[selected] == 0).any() and (labels[selected] == 1).any()  # some samples hit the original
    # metrics stay 0-d tensors until the loop reads them (no host sync per step); approx is given plain floats,
    # since pytest 9 iterates over what it is given and a 0-d tensor cannot be iterated
    m = {name: float(value) for name, value in output.metrics.items()}
    assert output.loss.item() == pytest.approx(m["generator_loss"] + 50 * m["discriminator_loss"], rel=1e-6)
    assert m["replaced_fraction"] == pytest.approx(labels.mean().item())
    assert output.supervised_positions == 16 * 32 + 16 * 16


def test_electras_table5_ablation_takes_the_backbones_loss_where_the_paper_does():
    """ELECTRA 15 %: the discriminator's loss over the generator's positions only; Replace MLM: the original token
    predicted there from the generator's samples; All-Tokens MLM: predicted at every position. One generator."""
    tokens = random_tokens(4, 32)
    for spec, task, own in (("electra:supervise=masked", "discriminator", "masked"), ("electra:head=mlm", "mlm", "all"),
                            ("electra:head=mlm,supervise=masked", "mlm", "masked")):
        objective = tiny_objective(spec, 32)
        batch = objective.corrupt(tokens, torch.Generator().manual_seed(3))
        torch.manual_seed(0)
        output = objective(batch)
        masked = batch.num_supervised
        positions = masked if own == "masked" else tokens.numel()
        assert output.supervised_positions == positions + masked == objective.counted_positions(batch)
        assert objective.loss_counts(batch) == {"generator": masked, task: positions}
        m = {name: float(value) for name, value in output.metrics.items()}
        weight = 50 if task == "discriminator" else 1
        assert output.loss.item() == pytest.approx(m["generator_loss"] + weight * m[f"{task}_loss"], rel=1e-6)
        assert set(output.terms) == {"generator", task}
        assert objective.replacement_story(batch) is None  # no Bayes reference is claimed for an ablation
        if task == "discriminator":
            assert output.tensors["discriminator_labels"].numel() == masked
        else:
            assert not hasattr(objective, "discriminator_head") and output.tensors == {}
    with pytest.raises(ConfigError, match="electra head must be one of"):
        tiny_objective("electra:head=cls", 32)


def test_electra_generator_is_a_quarter_wide_and_shares_embeddings():
    objective = tiny_objective("electra", 16, model="small")
    assert objective.generator_config.d_model == 64 and objective.generator_config.n_layer == 4
    names = [name for name, _ in objective.named_parameters()]
    assert sum("token_embedding" in name for name in names) == 1


@pytest.mark.parametrize("model", ["tiny", "small"])
@pytest.mark.parametrize("spec", ["ar", "mlm", "mlm:rule=bernoulli,rate=0.3", "electra", "span", "mlm:pair=nsp",
                                  "mlm:pair=sop,rule=bernoulli", "electra:supervise=masked",
                                  "electra:head=mlm,supervise=masked", "electra:head=mlm"])
def test_analytic_step_flops_match_the_flop_counter(spec, model):
    seq_len = 64 if model == "tiny" else 32
    objective = tiny_objective(spec, seq_len, model=model)
    batch = objective.corrupt(random_tokens(3, seq_len), torch.Generator().manual_seed(10))
    measured = measure_flops(lambda: objective(batch).loss.backward())
    assert abs(objective.flops(batch) - measured) <= 0.02 * measured
    if "bernoulli" not in spec:  # exact counts: the per-sequence expectation is the batch count
        assert objective.expected_flops_per_sequence(seq_len) * 3 == objective.flops(batch)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["ar", "mlm", "electra", "span", "mlm:pair=sop"])
def test_every_objective_learns_on_the_tiny_preset(spec):
    objective = tiny_objective(spec, 32)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=3e-3)
    batch = objective.corrupt(random_tokens(8, 32, 11), torch.Generator().manual_seed(11))
    losses = []
    for _ in range(25):
        output = objective(batch)
        optimizer.zero_grad()
        output.loss.backward()
        optimizer.step()
        losses.append(output.loss.item())
        assert output.supervised_positions == objective.counted_positions(batch)
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_generation_with_kv_cache_equals_greedy_recomputation():
    objective = tiny_objective("ar").eval()
    prompt = random_tokens(2, 5)
    generated = objective.generate(prompt, 12, temperature=0)
    tokens = prompt
    for _ in range(12):  # recompute the whole prefix for every new token
        next_token = objective.backbone.logits(objective.backbone(tokens, attention="causal")[:, -1]).argmax(-1)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    assert torch.equal(generated, tokens)
    sampled = objective.generate(prompt, 8, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    assert sampled.shape == (2, 13) and torch.equal(sampled[:, :5], prompt)
    with pytest.raises(ConfigError, match="max_seq_len"):
        objective.generate(prompt, 100)


@pytest.mark.parametrize("spec, message", [
    ("bert", "unknown objective 'bert'"),
    ("mlm:ratio=0.2", "unknown mlm option 'ratio'"),
    ("mlm:rate=1.5", "mlm rate must be in"),
    ("mlm:rate=-0.1", "mlm rate must be in"),
    ("mlm:rate=0", "mlm rate must be in"),
    ("mlm:mask=0.7", "split must sum to 1"),
    ("mlm:rule=sometimes", "mlm rule"),
    ("mlm:rate=abc", "not a valid float"),
    ("mlm:rate", "key=value"),
    ("electra:gen_width=2", "gen_width"),
    ("electra:disc_weight=nan", "not a valid float"),
    ("span:density=0", "span density"),
    ("span:mean_span=0.5", "mean_span"),
    ("mlm:pair=isnext", "mlm pair must be one of nsp, sop"),
    ("mlm:pair=nsp,whole_word=true", "token masking"),
    ("mlm:pair=sop,static=10", "dynamic masking"),
])
def test_bad_specs_raise_one_clear_error(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(spec)


@pytest.mark.parametrize("spec, seq_len, message", [("ar", 1, "seq_len >= 2"), ("span", 5, "too short"),
                                                    ("mlm", 100, "max_seq_len"), ("mlm:pair=nsp", 4, "at least 5"),
                                                    ("mlm:pair=sop,rate=1", 64, "masks more positions")])
def test_sequences_too_short_or_long_are_rejected(spec, seq_len, message):
    with pytest.raises(ConfigError, match=message):
        tiny_objective(spec, seq_len=64).check_seq_len(seq_len)


def test_span_needs_enough_sentinels():
    with pytest.raises(ConfigError, match="sentinels"):
        tiny_objective("span", 64, Vocab.for_words(40, num_sentinels=2)).check_seq_len(64)


def test_objective_lists_keep_options_together():
    assert parse_objective_list("mlm,ar,mlm:rate=0.4,mask=1.0,random=0,keep=0,electra") == \
        ["mlm", "ar", "mlm:rate=0.4,mask=1.0,random=0,keep=0", "electra"]
    with pytest.raises(ConfigError, match="no objectives"):
        parse_objective_list(" , ")


def test_roc_auc_equals_the_pairwise_count():
    from objectives.electra import roc_auc
    generator = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 5, (60,), generator=generator).double()  # many ties
    positive = torch.rand(60, generator=generator) < 0.3
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p in scores[positive] for n in scores[~positive]]
    assert roc_auc(scores, positive) == pytest.approx(sum(pairs) / len(pairs))


SPECS = ["mlm", "ar", "electra", "span", "mlm:rule=bernoulli", "mlm:whole_word=true", "electra:rule=bernoulli",
         "mlm:pair=nsp"]


@pytest.mark.parametrize("spec", SPECS)
def test_supervised_indices_survive_slicing_and_stacking(spec):
    # the indices found once at corruption must be what the targets say after every cut a step makes
    objective = tiny_objective(spec, 32)
    batch = objective.corrupt(random_tokens(6, 32), torch.Generator().manual_seed(3))
    parts = [batch.rows(slice(0, 1)), batch.rows(slice(1, 4)), batch.rows(slice(4, 6))]
    for part in [batch, *parts, Corrupted.concat(parts)]:
        assert torch.equal(part.supervised, (part.targets.reshape(-1) != IGNORE).nonzero().squeeze(1))
        assert list(part.row_offsets) == [0, *(part.targets != IGNORE).sum(1).cumsum(0).tolist()]
        extra = part.targets.numel() if spec.startswith("electra") else len(part.targets) if "pair" in spec else 0
        assert part.num_supervised == objective.counted_positions(part) - extra


@pytest.mark.parametrize("spec", SPECS)
def test_micro_batch_gradients_add_up_to_the_whole_batch(spec):
    from bench.training.loop import share_of_loss
    objective = tiny_objective(spec, 16)
    batch = objective.corrupt(random_tokens(4, 16), torch.Generator().manual_seed(5))

    def gradients(micro_size: int, weigh=share_of_loss) -> list[torch.Tensor]:
        objective.zero_grad(set_to_none=True)
        torch.manual_seed(11)  # ELECTRA's samples: one stream, drawn in row order either way
        totals = objective.loss_counts(batch)
        for start in range(0, 4, micro_size):
            micro = batch.rows(slice(start, start + micro_size))
            weigh(objective, objective(micro), micro, totals, 1, whole=micro_size == 4).backward()
        return [p.grad.clone() for p in objective.parameters() if p.grad is not None]

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:
        # Splitting the batch reorders float32 sums (u = 2^-24 = 6e-8 per addition) of up to n = 4 rows x 16
        # positions x 64 hidden units = 4,096 terms, which can move an element by n·u = 2.4e-4 of the terms' summed
        # magnitude, and an element near zero is a cancellation of terms as large as the tensor's largest: so each
        # tensor is held to 1e-4 of its largest element, not element by element (measured across these objectives
        # with torch 2.13 and 2.14: at most 6.3e-6; a wrong weighting below is off by 0.44)
        return bool((a - b).abs().max() <= 1e-4 * b.abs().max())

    whole = gradients(4)
    for size in (1, 2):
        for a, b in zip(gradients(size), whole, strict=True):
            assert close(a, b), (size, (a - b).abs().max().item(), b.abs().max().item())
    if spec == "electra:rule=bernoulli":
        # one weight per micro-batch (its share of the rows) is not the whole batch's gradient when rows hold
        # different numbers of masked positions: each mean needs its own count
        def by_rows(objective, output, micro, totals, world, whole):
            return output.loss * len(micro.targets) / len(batch.targets)
        assert any(not close(a, b) for a, b in zip(gradients(1, by_rows), whole))


@pytest.mark.parametrize("spec", list(REGISTRY))
def test_forward_and_backward_make_every_tensor_on_the_inputs_device(spec):
    # With "meta" as the default device, a tensor made without an explicit device lands on meta, and mixing it with
    # the CPU model's tensors fails: on a GPU it would have been made on the CPU and copied, or failed the same way.
    objective = tiny_objective(spec, 32)
    batch = objective.corrupt(random_tokens(4, 32), torch.Generator().manual_seed(2))  # corruption is host-side
    with torch.device("meta"):
        output = objective(batch)
        output.loss.backward()
    assert output.loss.device.type == "cpu" and torch.isfinite(output.loss)
    assert all(p.grad is not None and p.grad.device.type == "cpu" for p in objective.parameters() if p.requires_grad)
    for value in output.metrics.values():
        assert not isinstance(value, torch.Tensor) or value.device.type == "cpu"


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_pairs_are_laid_out_as_bert_and_never_mask_the_specials(task):
    objective = tiny_objective(f"mlm:pair={task}", 32)
    tokens = random_tokens(64, 32, 4)
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(4))
    restored = torch.where(batch.targets != IGNORE, batch.targets, batch.inputs)  # the pair before masking
    content = 32 - 3
    labels = batch.info["is_next"]
    assert 10 < int(labels.sum()) < 54
    for i, (row, segments) in enumerate(zip(restored, batch.info["segments"])):
        separator = int((row[1:] == VOCAB.EOS).nonzero()[0]) + 1
        assert row[0] == VOCAB.BOS and row[-1] == VOCAB.EOS
        assert segments.tolist() == [0] * (separator + 1) + [1] * (31 - separator)
        a, b = row[1:separator], row[separator + 1:-1]
        if labels[i] == 1:
            assert torch.equal(torch.cat([a, b]), tokens[i, :content])
        elif task == "sop":  # the same window, its two segments swapped
            assert torch.equal(torch.cat([b, a]), tokens[i, :content])
        else:  # a from this window, b from the same positions of another one
            assert torch.equal(a, tokens[i, :len(a)])
            sources = [j for j in range(64) if torch.equal(tokens[j, len(a):content], b)]
            assert sources and i not in sources
    special = restored == VOCAB.EOS
    special[:, 0] = True
    assert not (batch.targets != IGNORE)[special].any()  # [BOS] and [EOS] are never chosen, as in BERT
    # round(0.15 · 32) = 5 masked positions per window, counted over all 32 (BERT counts [CLS] and [SEP]), + 1 pair
    assert ((batch.targets != IGNORE).sum(1) == 5).all()
    assert objective.counted_positions(batch) == 64 * 6 == objective.expected_supervised_positions(32) * 64


def test_the_pair_loss_is_the_mean_cross_entropy_of_the_head_on_the_first_position():
    objective = tiny_objective("mlm:pair=nsp", 32).eval()
    batch = objective.corrupt(random_tokens(8, 32, 5), torch.Generator().manual_seed(5))
    output = objective(batch)
    hidden = objective.backbone(batch.inputs, attention="bidirectional", segments=batch.info["segments"])
    pooled = torch.tanh(hidden[:, 0] @ objective.pair_head[0].weight.T + objective.pair_head[0].bias)
    logits = pooled @ objective.pair_head[2].weight.T + objective.pair_head[2].bias
    log_p = logits.log_softmax(-1)
    expected = -log_p[torch.arange(8), batch.info["is_next"]].mean()
    assert output.terms["pair"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert output.loss.item() == pytest.approx(output.terms["masked"].item() + expected.item(), rel=1e-5)
    assert objective.loss_counts(batch) == {"masked": batch.num_supervised, "pair": 8}
    # the segment embeddings are read: swapping the segment ids changes the hidden states
    flipped = objective.backbone(batch.inputs, attention="bidirectional", segments=1 - batch.info["segments"])
    assert not torch.allclose(hidden, flipped)


def test_electra_pooled_metrics_read_as_the_paper_reads_them():
    """Precision and recall of "replaced" at probability 0.5, accuracy on each label, counted by hand."""
    objective = tiny_objective("electra", 8)
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0], [-0.2, 1.0, -2.0, -1.0]])
    labels = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    outputs = [type("O", (), {"tensors": {"discriminator_logits": logits, "discriminator_labels": labels}})]
    metrics = objective.pooled_metrics(outputs)
    # predicted replaced: (0,0) hit, (0,2) false alarm, (1,1) hit; replaced: (0,0), (0,1), (1,1)
    assert metrics["discriminator_precision"] == pytest.approx(2 / 3)
    assert metrics["discriminator_recall"] == pytest.approx(2 / 3)
    assert metrics["discriminator_original_accuracy"] == pytest.approx(4 / 5)
    assert metrics["discriminator_predicted_replaced"] == pytest.approx(3 / 8)
    silent = objective.pooled_metrics([type("O", (), {"tensors": {"discriminator_logits": -logits.abs() - 1,
                                                                  "discriminator_labels": labels}})])
    assert silent["discriminator_precision"] == 0.0 and silent["discriminator_recall"] == 0.0


def test_electra_replacement_story_is_the_distribution_its_samples_are_drawn_from():
    """At a masked position the story's distribution is the generator's own (what forward samples from); at any
    other position it is the generator's distribution with that position masked as well."""
    objective = tiny_objective("electra:rate=0.3", 16).eval()
    tokens = random_tokens(3, 16, 4)
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(4))
    distributions, resample = objective.replacement_story(batch)
    assert distributions.shape == (3, 16, VOCAB.size) and resample == pytest.approx(0.3 * 0.85)
    assert torch.allclose(distributions.sum(-1), torch.ones(3, 16))

    def generator_distribution(inputs):
        hidden = objective.generator(objective.generator_in(objective.backbone.embed(inputs)), attention="bidirectional")
        return objective.backbone.logits(objective.generator_head(hidden)).float().softmax(-1)

    with torch.no_grad():
        masked = batch.inputs == VOCAB.MASK
        assert masked.any()
        assert torch.allclose(distributions[masked], generator_distribution(batch.inputs)[masked], atol=1e-6)
        inputs = batch.inputs.clone()
        inputs[:, 5] = VOCAB.MASK
        assert torch.allclose(distributions[:, 5], generator_distribution(inputs)[:, 5], atol=1e-6)
