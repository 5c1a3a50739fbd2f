import argparse
import math

import pytest
import torch

from backbone import ConfigError, preset
from bench.analysis.density import build_on_meta
from bench.data.corpus import load_corpus
from bench.training.recipe import Phase, SeqLenSchedule, parse_seq_len, predict_phases, single_seq_len
from objectives import Vocab

# BERT's pretraining (Devlin et al. 2019, Section A.2; docs/sources.md): 10^6 steps of 256 windows, 90 % of the steps at T = 128 and 10 % at T = 512
BERT_STEPS, BERT_BATCH = (900_000, 100_000), 256


def test_a_plain_length_is_one_phase_and_is_recorded_as_before():
    for value in (128, "128", " 128 ", "128:1"):
        schedule = parse_seq_len(value)
        assert schedule.phases == (Phase(128, 1.0),) and schedule.is_fixed
        assert schedule.recorded() == 128 and schedule.text == "128"


def test_a_schedule_parses_records_as_text_and_rereads_to_itself():
    schedule = parse_seq_len("128:0.9, 512:0.1")
    assert schedule.phases == (Phase(128, 0.9), Phase(512, 0.1))
    assert (schedule.longest, schedule.final, schedule.lengths) == (512, 512, [128, 512])
    assert schedule.recorded() == "128:0.9,512:0.1" and parse_seq_len(schedule.recorded()) == schedule
    # lengths need not increase; the longest is the corpus's and the last is the one evaluated at
    down = parse_seq_len("512:0.5,64:0.25,128:0.25")
    assert (down.longest, down.final) == (512, 128)


def test_the_phase_is_chosen_by_the_flops_spent():
    schedule = parse_seq_len("128:0.9,512:0.1")
    assert schedule.ends(1000.0) == [900.0, 1000.0]
    assert [schedule.phase_at(flops, 1000.0) for flops in (0, 899, 899.999, 900, 999, 1000, 5000)] == \
        [0, 0, 0, 1, 1, 1, 1]
    # the last phase ends at the budget even when the shares' floating sum is not exactly 1
    thirds = parse_seq_len(f"8:{1 / 3!r},16:{1 / 3!r},32:{1 / 3!r}")
    assert thirds.ends(3.0)[-1] == 3.0 and thirds.phase_at(2.0, 3.0) == 2


@pytest.mark.parametrize("text, message", [
    ("128:0.9,512:0.2", "the shares sum to 1.1, not 1"),
    ("128:0.5", "the shares sum to 0.5, not 1"),
    ("128:0,512:1", "share 0 of length 128 must be a positive fraction"),
    ("128:-0.5,512:1.5", "share -0.5 of length 128 must be a positive fraction"),
    ("128:nan,512:1", "share nan of length 128"),
    ("1:0.5,512:0.5", "length 1 must be a whole number >= 2"),
    ("0", "--seq-len must be >= 2, got 0"),
    ("128.5:0.5,512:0.5", "length '128.5' is not a whole number"),
    ("128:x,512:0.1", "share 'x' is not a number"),
    ("128:0.9;512:0.1", "is not LENGTH:SHARE"),
    ("128:0.9,", "'' is not LENGTH:SHARE"),
    ("128,512:1", "'128' is not LENGTH:SHARE"),
    ("128:0.5:1", "is not LENGTH:SHARE"),
    ("long", "'long' is not LENGTH:SHARE"),
])
def test_every_mistake_in_a_schedule_is_one_config_error_line(text, message):
    with pytest.raises(ConfigError) as error:
        parse_seq_len(text)
    assert message in str(error.value) and len(str(error.value).splitlines()) == 1


def test_commands_with_one_length_refuse_a_schedule_with_one_line():
    assert single_seq_len("512") == 512
    with pytest.raises(argparse.ArgumentTypeError, match="is a schedule; this command takes one length"):
        single_seq_len("128:0.9,512:0.1")


def test_short_phases_read_the_long_windows_cut_in_order():
    corpus = load_corpus("synthetic:train=8,heldout=4,words=64,lexicon=8", 32)
    long, short = corpus.windows("train"), corpus.windows("train", 10)  # 3 windows of 10 per window of 32
    assert len(short) == 3 * len(long) and corpus.windows("train", 32).__class__ is long.__class__
    for index in (0, 4, 23):
        row, piece = divmod(index, 3)
        assert torch.equal(short[[index]][0], long[[row]][0][10 * piece:10 * piece + 10])
    # the first 30 tokens of each long window, in order; the last 2 are dropped
    assert torch.equal(short[:], long[:][:, :30].reshape(-1, 10))
    assert torch.equal(short[torch.tensor([23, 0])], short[[23, 0]]) and short[5:5].shape == (0, 10)
    with pytest.raises(ConfigError, match="cannot be cut"):
        corpus.windows("train", 64)


def bert_base_mlm():
    vocab = Vocab.for_tokenizer(30522)
    return build_on_meta("mlm", preset("base", vocab.size, max_seq_len=512), vocab)


def test_the_accounting_gives_berts_steps_and_tokens_from_its_flop_shares():
    mlm = bert_base_mlm()
    per_sequence = mlm.expected_flops_per_sequence
    # the FLOPs BERT spent in each phase, by hand: steps × batch × FLOPs per sequence at that length
    spent = [steps * BERT_BATCH * per_sequence(length) for steps, length in zip(BERT_STEPS, (128, 512))]
    budget = sum(spent)
    schedule = SeqLenSchedule((Phase(128, spent[0] / budget), Phase(512, spent[1] / budget)))
    phases = predict_phases(schedule, budget, BERT_BATCH, per_sequence, mlm.expected_supervised_positions)
    assert [p.seq_len for p in phases] == [128, 512]
    for phase, steps in zip(phases, BERT_STEPS):
        assert abs(phase.steps - steps) <= 1  # floating rounding at the phase's end
    tokens = sum(p.tokens for p in phases)
    assert tokens == pytest.approx(0.9e6 * 256 * 128 + 0.1e6 * 256 * 512, abs=256 * 512)  # 4.26e10
    assert f"{tokens:.3g}" == "4.26e+10"
    assert sum(p.flops for p in phases) == pytest.approx(budget, rel=1e-6)
    # supervised: round(0.15 T) per window, 19 at 128 and 77 at 512
    assert sum(p.supervised_positions for p in phases) == pytest.approx(
        0.9e6 * 256 * 19 + 0.1e6 * 256 * 77, rel=1e-5)
    # T = 512 throughout for the same 10^6 steps: 1.31e11 token positions, for 3.3 times the FLOPs
    throughout = predict_phases(SeqLenSchedule.fixed(512), 1e6 * BERT_BATCH * per_sequence(512), BERT_BATCH,
                                per_sequence)
    assert throughout[0].steps == 1_000_000 and throughout[0].tokens == 1e6 * 256 * 512 == 131_072_000_000
    # ...and at BERT's FLOPs, T = 512 throughout runs 0.9e6 · F(128) / F(512) + 0.1e6 steps: fewer positions flow
    equal = predict_phases(SeqLenSchedule.fixed(512), budget, BERT_BATCH, per_sequence)[0]
    by_hand = 0.9e6 * per_sequence(128) / per_sequence(512) + 0.1e6
    assert equal.steps == math.ceil(by_hand) == 306_234  # BERT-base with its MLM transform head
    assert equal.tokens == equal.steps * 256 * 512 and f"{equal.tokens:.3g}" == "4.01e+10"
    assert tokens / equal.tokens == pytest.approx((0.9e6 * 128 + 0.1e6 * 512) / (by_hand * 512), rel=1e-5)


def test_a_phase_too_small_for_one_step_gets_none():
    # 1 % of the budget is less than one step of the first phase: it overshoots past the second phase's end
    phases = predict_phases(parse_seq_len("8:0.5,16:0.01,32:0.49"), 100.0, 1, lambda length: 30.0)
    assert [p.steps for p in phases] == [2, 0, 2] and phases[0].flops == 60.0 and phases[0].supervised_positions \
        is None
