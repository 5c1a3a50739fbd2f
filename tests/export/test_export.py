"""bench.export: every objective's exported backbone, reloaded with the `transformers` Auto class, gives the suite's
own outputs. Every parameter is randomised first (norm weights and biases too), so a weight in the wrong place or
a permutation off by one shows.

Tolerances: the shipped model code runs the suite's operations in the suite's order, so its logits are equal bit for
bit (atol = rtol = 0), with and without padding (a padded batch against the suite's own reading of padded examples).
GPT-NeoX and GPT-2 compute the same function with other kernels (NeoX's RoPE angles in fp32, its attention mask as
floats): within 1e-5.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM,  # noqa: E402
                          AutoModelForPreTraining, AutoModelForSequenceClassification,
                          AutoModelForTokenClassification, GenerationConfig)

from backbone import Backbone, resolve_model  # noqa: E402
from bench.downstream import context_for_run  # noqa: E402
from bench.export import export_objective  # noqa: E402
from bench.export.mapping import last_piece  # noqa: E402
from bench.yardsticks.downstream import forward as suite_reading  # noqa: E402
from bench.yardsticks.examples import Split  # noqa: E402
from objectives import Vocab, build_objective  # noqa: E402
from objectives.pairs import segments_from_separators  # noqa: E402
from tests.helpers import recorded_settings  # noqa: E402

SETTINGS = recorded_settings("synthetic:words=64,lexicon=8,topics=2", 16)
CONTEXT = context_for_run(Path("."), SETTINGS)  # the embedded language reads no file
NEOX = dict(atol=1e-5, rtol=0)  # GPT-NeoX's and GPT-2's kernels against the suite's


def randomized(spec: str, model: str = "tiny"):
    """`spec` on a tiny backbone with every parameter drawn at random."""
    torch.manual_seed(0)
    vocab = CONTEXT.vocab
    objective = build_objective(spec, Backbone(resolve_model(model, vocab.size, CONTEXT.seq_len)), vocab)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in objective.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.4)
    return objective.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """spec -> (objective, export folder), each exported once."""
    made = {}

    def export(spec: str, model: str = "tiny"):
        if (spec, model) not in made:
            objective = randomized(spec, model)
            made[spec, model] = objective, export_objective(objective, CONTEXT, tmp_path_factory.mktemp("export"))
        return made[spec, model]

    return export


def tokens(batch: int = 3, seed: int = 0) -> torch.Tensor:
    vocab = CONTEXT.vocab
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(vocab.first_ordinary, vocab.end_ordinary, (batch, CONTEXT.seq_len), generator=generator)


def padded(ids: torch.Tensor, lengths: torch.Tensor, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask) with each row's first `length` tokens kept and [PAD] after (or before) them."""
    positions = torch.arange(ids.shape[1])
    mask = positions[None, :] < lengths[:, None]
    ids = torch.where(mask, ids, Vocab.PAD)
    if left:  # rotate each row right by its padding
        index = (positions[None, :] - (ids.shape[1] - lengths)[:, None]) % ids.shape[1]
        ids, mask = ids.gather(1, index), mask.gather(1, index)
    return ids, mask.long()


def real(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Each row's values at its tokens, in order."""
    return [row[keep.bool()] for row, keep in zip(values, mask)]


def load(auto, folder: Path):
    return auto.from_pretrained(folder, trust_remote_code=True).eval()


# --- the shipped model code: equal bit for bit -----------------------------------------------------------------

@pytest.mark.parametrize("spec,model", [("mlm", "tiny"), ("ar>mlm@0.5", "tiny"), ("mlm", "tiny:positions=learned")])
def test_masked_lm_logits_equal_the_suites(exported, spec, model):
    objective, folder = exported(spec, model)
    piece, ids = last_piece(objective), tokens()
    backbone = piece.backbone
    with torch.no_grad():
        hidden = backbone(ids, attention="bidirectional")
        # BERT's head: the transform, then the tied decoder
        assert torch.equal(load(AutoModelForMaskedLM, folder)(ids).logits, piece.vocabulary_logits(hidden))
        assert torch.equal(load(AutoModel, folder)(input_ids=ids).last_hidden_state, hidden)
        short = ids[:, :11]  # shorter than the window: RoPE tables for the positions read, as the suite slices them
        expected = piece.vocabulary_logits(backbone(short, attention="bidirectional"))
        assert torch.equal(load(AutoModelForMaskedLM, folder)(short).logits, expected)


@pytest.mark.parametrize("spec", ["mlm", "mlm:pair=sop", "span"])
def test_padding_left_or_right_equals_the_suites_reading_of_padded_examples(exported, spec):
    """The suite reads a padded example bidirectionally over its tokens with the padding masked (downstream's
    reading); the export gives those numbers for right and for left padding alike."""
    objective, folder = exported(spec)
    backbone, lengths = last_piece(objective).backbone, torch.tensor([16, 11, 5])
    ids, mask = padded(tokens(), lengths, left=False)
    segments = segments_from_separators(ids) if backbone.segment_embedding is not None else None
    model = load(AutoModel, folder)
    with torch.no_grad():
        # the suite reads every layer (the last after the final norm, last on the axis); the export's is the last
        expected = real(suite_reading(backbone, False, Split(ids, lengths, lengths))[..., -backbone.config.d_model:],
                        mask)
        for left in (False, True):
            shown, shown_mask = padded(tokens(), lengths, left)
            types = None if segments is None else padded(segments, lengths, left)[0]
            hidden = model(input_ids=shown, attention_mask=shown_mask, token_type_ids=types).last_hidden_state
            assert all(torch.equal(a, b) for a, b in zip(real(hidden, shown_mask), expected))


def test_sentence_pair_backbone_reads_token_types_and_its_pair_head(exported):
    objective, folder = exported("mlm:pair=sop")
    batch = objective.corrupt(tokens(), torch.Generator().manual_seed(0))
    segments, backbone = batch.info["segments"], objective.backbone
    with torch.no_grad():
        hidden = backbone(batch.inputs, attention="bidirectional", segments=segments)
        out = load(AutoModelForPreTraining, folder)(input_ids=batch.inputs, token_type_ids=segments)
        assert torch.equal(out.prediction_logits, objective.vocabulary_logits(hidden))
        assert torch.equal(out.seq_relationship_logits, objective.pair_head(hidden[:, 0]))
        single = objective.vocabulary_logits(backbone(batch.inputs, attention="bidirectional"))  # all segment A
        assert torch.equal(load(AutoModelForMaskedLM, folder)(batch.inputs).logits, single)


def test_electra_discriminator_and_generator_equal_the_suites(exported):
    objective, folder = exported("electra")
    backbone, ids = objective.backbone, tokens()
    with torch.no_grad():
        discriminator = objective.discriminator_head(backbone(ids, attention="bidirectional")).squeeze(-1)
        assert torch.equal(load(AutoModelForPreTraining, folder)(ids).logits, discriminator)
        generated = objective.generator(objective.generator_in(backbone.embed(ids)), attention="bidirectional")
        expected = backbone.logits(objective.generator_head(generated))
        assert torch.equal(load(AutoModelForMaskedLM, folder / "generator")(ids).logits, expected)


def test_span_prefix_lm_logits_and_generation_equal_the_suites(exported):
    objective, folder = exported("span")
    batch = objective.corrupt(tokens(), torch.Generator().manual_seed(0))
    backbone, prefix = objective.backbone, batch.prefix_len
    model = load(AutoModelForCausalLM, folder)
    with torch.no_grad():
        expected = backbone.logits(backbone(batch.inputs, attention="prefix", prefix_len=prefix))
        assert torch.equal(model(batch.inputs, prefix_len=prefix).logits, expected)
        whole = backbone(batch.inputs, attention="prefix", prefix_len=CONTEXT.seq_len)  # the probes' reading
        assert torch.equal(load(AutoModel, folder)(input_ids=batch.inputs).last_hidden_state, whole)
        prompt, steps = batch.inputs[:, :prefix], CONTEXT.seq_len - prefix
        sequence = prompt
        for _ in range(steps):  # the suite's greedy prefix-LM decoding: the prompt is the prefix, read anew each step
            logits = backbone.logits(backbone(sequence, attention="prefix", prefix_len=prefix)[:, -1])
            sequence = torch.cat([sequence, logits.argmax(-1, keepdim=True)], dim=1)
        greedy = GenerationConfig(max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=Vocab.PAD)
        assert torch.equal(model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=greedy),
                           sequence)


def test_a_causal_backbone_with_segment_embeddings_ships_its_code(exported):
    """A schedule that began with sentence pairs leaves segment embeddings in its causal backbone, which GPT-NeoX
    cannot hold: the shipped family reads it causally, segment A added as the suite adds it."""
    objective, folder = exported("mlm:pair=sop>ar@0.5")
    backbone, ids = objective.backbone, tokens()
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["ObjectiveBenchForCausalLM"]
    with torch.no_grad():
        expected = backbone.logits(backbone(ids, attention="causal"))
        assert torch.equal(load(AutoModelForCausalLM, folder)(ids).logits, expected)


# --- stock classes: GPT-NeoX (RoPE) and GPT-2 (learned positions), within 1e-5 --------------------------------

@pytest.mark.parametrize("model,architecture", [("tiny", "GPTNeoXForCausalLM"),
                                                ("tiny:positions=learned", "GPT2LMHeadModel")])
def test_causal_export_is_a_stock_class_with_the_suites_logits(exported, model, architecture):
    objective, folder = exported("ar", model)
    assert not (folder / "modeling_objective_bench.py").exists()  # no remote code
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(hf).__name__ == architecture
    backbone, ids, lengths = objective.backbone, tokens(), torch.tensor([16, 11, 5])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, backbone.logits(backbone(ids, attention="causal")), **NEOX)
        right, mask = padded(ids, lengths, left=False)
        expected = real(backbone.logits(backbone(right, attention="causal")), mask)
        for left in (False, True):
            shown, shown_mask = padded(ids, lengths, left)
            positions = (shown_mask.cumsum(1) - 1).clamp_min(0)  # as generate and lm-eval's padding give them
            logits = hf(input_ids=shown, attention_mask=shown_mask, position_ids=positions).logits
            for got, want in zip(real(logits, shown_mask), expected):
                torch.testing.assert_close(got, want, **NEOX)


def test_greedy_generation_of_the_causal_export_equals_the_suites_kv_cached_generation(exported):
    objective, folder = exported("ar")
    prompt, steps = tokens(batch=2)[:, :5], 10
    expected = objective.generate(prompt, steps, temperature=0)
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    greedy = GenerationConfig(max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=Vocab.PAD)
    assert torch.equal(hf.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=greedy),
                       expected)


def test_neox_config_holds_both_spellings_of_rope(exported):
    config = json.loads((exported("ar")[1] / "config.json").read_text())
    assert (config["rotary_pct"], config["rotary_emb_base"]) == (1.0, 10000.0)  # transformers v4
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 1.0}  # v5
    assert (config["use_parallel_residual"], config["hidden_act"], config["tie_word_embeddings"]) == (
        False, "gelu", True)


@pytest.mark.parametrize("spec", ["mlm", "electra", "span", "ar"])
def test_every_export_takes_a_sequence_and_a_token_classification_head_and_trains(exported, spec):
    _, folder = exported(spec)
    ids, mask = padded(tokens(), torch.tensor([16, 11, 5]), left=False)
    for auto, labels in ((AutoModelForSequenceClassification, torch.tensor([0, 2, 1])),
                         (AutoModelForTokenClassification, torch.where(mask.bool(), ids % 3, -100))):
        model = auto.from_pretrained(folder, trust_remote_code=True, num_labels=3)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        assert out.logits.shape[-1] == 3 and torch.isfinite(out.loss)
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
