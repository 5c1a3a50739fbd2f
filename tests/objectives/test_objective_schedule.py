"""Objective schedules (objectives.schedule): `ar>mlm@0.25` trains one backbone with AR, then MLM on the same weights.
What is checked: the grammar, the phases cut at the switch, the switch exact in FLOPs, the accounting, what carries
over (weights, optimizer, learning-rate schedule) and resume in the middle of the second piece."""

import json

import pytest
import torch

import bench.training.loop
from backbone import Backbone, ConfigError, preset
from bench.orchestration.planning import predicted_phases
from bench.training.batches import build_run_objective, eval_batches
from bench.training.recipe import Phase, RunConfig, learning_rate, parse_seq_len
from bench.training.runs import train_run
from bench.training.state import Context, Work
from objectives import ObjectiveSchedule, Vocab, build_objective, parse_objective_list
from objectives.schedule import split_schedule

SEQ_LEN, BATCH = 32, 4
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second")


def config(**overrides) -> RunConfig:
    return RunConfig(budget_flops=4e8, model="tiny", batch_size=BATCH, eval_windows=8, eval_points=3, lr=3e-3,
                       **overrides)


def test_a_schedule_spec_names_its_pieces_and_where_each_starts():
    assert split_schedule("ar>mlm@0.25") == (["ar", "mlm"], [0.0, 0.25])
    assert split_schedule("ar > mlm:rate=0.4,mask=0.9 @0.5 > electra@0.75") == \
        (["ar", "mlm:rate=0.4,mask=0.9", "electra"], [0.0, 0.5, 0.75])
    # in a list of objectives, a piece's options continue it as any spec's do
    assert parse_objective_list("mlm,ar>mlm:rate=0.4,mask=0.9,random=0@0.5,ar") == \
        ["mlm", "ar>mlm:rate=0.4,mask=0.9,random=0@0.5", "ar"]


@pytest.mark.parametrize("text, message", [
    ("ar>mlm", "piece 'mlm' needs the share of the budget at which it starts"),
    ("ar@0.1>mlm@0.5", "the first piece starts at 0"),
    ("ar>mlm@x", "start 'x' is not a number"),
    ("ar>mlm@0", "starts must increase from 0 and stay below 1"),
    ("ar>mlm@1", "starts must increase from 0 and stay below 1"),
    ("ar>mlm@0.5>span@0.4", "piece 'span' starts at 0.4"),
    ("ar>@0.5", "has an empty piece"),
    ("ar>bert@0.5", "unknown objective 'bert'"),
    ("ar>mlm:rate=2@0.5", "mlm rate must be in (0, 1]"),
])
def test_every_mistake_in_a_schedule_spec_is_one_config_error_line(text, message):
    with pytest.raises(ConfigError, match="^[^\n]*" + message.replace("(", r"\(").replace(")", r"\)")):
        parse_objective_list(text)


def test_the_pieces_share_one_backbone_and_the_schedule_is_judged_as_its_last_piece():
    vocab = Vocab.for_words(32)
    backbone = Backbone(preset("tiny", vocab.size, max_seq_len=SEQ_LEN))
    schedule = build_objective("ar>mlm@0.25", backbone, vocab)
    assert isinstance(schedule, ObjectiveSchedule) and schedule.spec() == "ar>mlm@0.25"
    assert all(piece.backbone is backbone for piece in schedule.pieces) and schedule.backbone is backbone
    assert schedule.starts == (0.0, 0.25) and [p.spec() for p in schedule.pieces] == ["ar", "mlm"]
    assert (schedule.attention, schedule.tagging_ceiling) == ("bidirectional", "smoothing")
    assert schedule.expected_supervised_positions(SEQ_LEN) == schedule.pieces[1].expected_supervised_positions(SEQ_LEN)
    # nothing counted twice: the backbone once, and the masked LM's own head (BERT's transform)
    head = sum(p.numel() for p in schedule.pieces[1].transform.parameters())
    assert sum(p.numel() for p in schedule.parameters()) == backbone.num_parameters() + head
    assert schedule.pieces_with_own_parameters() == ["mlm"]
    assert build_objective("electra>mlm@0.5", backbone, vocab).pieces_with_own_parameters() == ["electra", "mlm"]
    assert build_objective("mlm>ar@0.5", backbone, vocab).pieces_with_own_parameters() == ["mlm"]
    # a batch goes to the piece that made it: its loss is that piece's
    tokens = torch.randint(4, 36, (2, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    for index, piece in enumerate(schedule.pieces):
        batch = piece.corrupt(tokens, torch.Generator().manual_seed(1))
        batch.piece = index
        assert schedule(batch).loss == piece(batch).loss and schedule.flops(batch) == piece.flops(batch)


def test_a_length_schedule_is_cut_at_the_switches_into_phases_of_one_length_and_one_piece():
    lengths = parse_seq_len("16:0.6,32:0.4")
    assert lengths.split_at((0.0,)) is lengths
    assert lengths.split_at((0.0, 0.25)).phases == (Phase(16, 0.25, 0), Phase(16, 0.35, 1), Phase(32, 0.4, 1))
    assert lengths.split_at((0.0, 0.75)).phases == (Phase(16, 0.6, 0), Phase(32, 0.15000000000000002, 0),
                                                    Phase(32, 0.25, 1))
    assert parse_seq_len("32").split_at((0.0, 0.5, 0.75)).phases == (Phase(32, 0.5, 0), Phase(32, 0.25, 1),
                                                                      Phase(32, 0.25, 2))
    # a switch at a phase's end that the float sum of the shares misses (0.1 + 0.2 = 0.30000000000000004) is a cut
    # there, not a second cut 5.6e-17 away, whose phase of no length no step could run
    three = parse_seq_len("16:0.1,32:0.2,64:0.7")
    assert [(phase.seq_len, phase.piece) for phase in three.split_at((0.0, 0.3)).phases] == [(16, 0), (32, 0),
                                                                                              (64, 1)]
    assert min(phase.share for phase in three.split_at((0.0, 0.3)).phases) > 0.09
    with pytest.raises(ConfigError, match="fall on one phase end"):  # a piece squeezed between them: no step
        three.split_at((0.0, 0.3, 0.3000005))
    counts = [{"share": 0.25, "steps": 2}, {"share": 0.35, "steps": 3}, {"share": 0.4, "steps": 5}]
    assert lengths.merged(counts, ("steps",)) == [{"seq_len": 16, "share": 0.6, "steps": 5},
                                                  {"seq_len": 32, "share": 0.4, "steps": 5}]


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["ar>mlm@0.25", "mlm>ar@0.5", "ar>mlm@0.25>electra@0.75"])
def test_the_switch_is_exact_in_flops_and_the_accounting_predicts_every_piece(spec, corpus, fabric, tmp_path):
    c = config()
    result = train_run(fabric, Work(spec, 0, c, tmp_path), Context(corpus))
    objective = build_run_objective(spec, c, corpus)
    pieces = split_schedule(spec)[0]
    phases = result.phases
    assert [phase["objective"] for phase in phases] == pieces
    predicted = predicted_phases(objective, parse_seq_len(SEQ_LEN).split_at(objective.starts), c)
    spent = 0
    for index, (phase, prediction) in enumerate(zip(phases, predicted)):
        assert {k: phase[k] for k in prediction if k != "seq_len"} == {k: v for k, v in prediction.items()
                                                                      if k != "seq_len"}
        step_flops = BATCH * objective.piece(index).expected_flops_per_sequence(SEQ_LEN)
        spent += phase["flops"]
        end = c.budget_flops * sum(p["share"] for p in phases[:index + 1])
        # the piece's last step started before its end and its first after the previous one's: exact in FLOPs
        assert spent - step_flops < end <= spent or index == len(phases) - 1
        assert phase["steps"] > 0
    assert sum(phase["flops"] for phase in phases) == result.flops >= c.budget_flops
    assert result.objective == spec and result.attention == objective.attention


@pytest.mark.slow
def test_at_the_switch_weights_optimizer_and_learning_rate_schedule_carry_over(corpus, fabric, tmp_path,
                                                                                monkeypatch):
    c = config(checkpoint_every=1e-9)  # minutes: the state is saved after every step
    straight = train_run(fabric, Work("ar>mlm@0.5", 0, c, tmp_path / "straight"), Context(corpus))
    switch = straight.phases[0]["steps"]
    # the AR share is an AR run's first steps exactly: the same initialisation, batches and learning rates
    train_run(fabric, Work("ar>mlm@0.5", 0, c, tmp_path / "first"), Context(corpus),
              stop_after_steps=switch)
    train_run(fabric, Work("ar", 0, c, tmp_path / "ar"), Context(corpus), stop_after_steps=switch)
    first, ar = (torch.load(tmp_path / name / "checkpoint.pt", weights_only=True) for name in ("first", "ar"))
    ar_backbone = {k.removeprefix("backbone."): v for k, v in ar["model"].items()}
    shared = {k.removeprefix("pieces.0.backbone."): v for k, v in first["model"].items()
              if k.startswith("pieces.0.backbone.")}
    assert shared.keys() == ar_backbone.keys() and all(torch.equal(shared[k], ar_backbone[k]) for k in shared)
    # one AdamW across the switch: its moments and step count go on (not reset), over every step of the run
    final = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)
    # (the masked LM's own head, BERT's transform, is stepped only in its share: it gets no gradient before)
    steps = {float(state["step"]) for state in final["optimizer"]["state"].values()}
    assert steps == {float(straight.steps), float(straight.phases[1]["steps"])}
    # and the learning rate is one schedule over the whole budget: the first MLM step's is the one at AR's FLOPs
    asked = []
    monkeypatch.setattr(bench.training.loop, "learning_rate",
                        lambda flops, budget, c: asked.append((flops, budget)) or learning_rate(flops, budget, c))
    train_run(fabric, Work("ar>mlm@0.5", 0, c, tmp_path / "watched"), Context(corpus))
    spent = [flops for flops, budget in dict.fromkeys(asked) if budget == c.budget_flops]  # not the branches'
    assert len(spent) == straight.steps and spent == sorted(spent) and spent[0] == 0
    assert spent[switch] == straight.phases[0]["flops"]


def test_resume_after_a_kill_in_the_second_piece_equals_the_uninterrupted_run(corpus, fabric, tmp_path):
    straight = train_run(fabric, Work("ar>mlm@0.25", 3, config(), tmp_path / "straight"), Context(corpus))
    switch, total = straight.phases[0]["steps"], straight.steps
    stop = (switch + total) // 2  # in the middle of MLM's share, between checkpoints
    assert switch < stop < total
    c = config(checkpoint_every=1e-9)
    assert train_run(fabric, Work("ar>mlm@0.25", 3, c, tmp_path / "resumed"), Context(corpus),
                     stop_after_steps=stop) is None
    state = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert [phase["steps"] for phase in state["counters"]["phases"]] == [switch, stop - switch]
    with pytest.raises(ConfigError, match="another objective schedule"):
        train_run(fabric, Work("ar>mlm@0.5", 3, c, tmp_path / "resumed"), Context(corpus))
    resumed = train_run(fabric, Work("ar>mlm@0.25", 3, c, tmp_path / "resumed"), Context(corpus))
    strip = lambda result: {k: v for k, v in result.to_json().items() if k not in TIMINGS}  # noqa: E731
    assert strip(resumed) == strip(straight)


def test_a_schedule_is_evaluated_on_its_last_pieces_batches(corpus):
    c = config()
    schedule, mlm = (build_run_objective(spec, c, corpus) for spec in ("ar>mlm@0.25", "mlm"))
    for ours, theirs in zip(eval_batches(schedule, corpus, c), eval_batches(mlm, corpus, c)):
        assert ours.piece == 1 and torch.equal(ours.inputs, theirs.inputs) and torch.equal(ours.targets,
                                                                                            theirs.targets)


@pytest.mark.slow
def test_a_comparison_runs_reports_and_resumes_a_schedule_beside_plain_objectives(tmp_path):
    from bench.compare import main
    out = tmp_path / "report"
    argv = ["--model", "tiny", "--seq-len", "16:0.6,32:0.4", "--batch-size", "4", "--budget", "3e8",
            "--eval-points", "3", "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--quiet",
            "--seeds", "1", "--no-probes", "--downstream", "none", "--objectives", "mlm,ar>mlm@0.25", "--out",
            str(out)]
    main(argv)
    results = json.loads((out / "results.json").read_text())
    schedule = next(run for run in results["runs"] if run["objective"] == "ar>mlm@0.25")
    assert [(p["seq_len"], p["objective"]) for p in schedule["phases"]] == [(16, "ar"), (16, "mlm"), (32, "mlm")]
    # the length schedule's accounting sees the schedule per length: its measured counts add up to the run's
    measured = results["seq_len_measured"]["ar>mlm@0.25"]
    assert [p["seq_len"] for p in measured] == [16, 32]
    assert sum(p["flops"] for p in measured) == schedule["flops"]
    predicted = results["seq_len_accounting"]["objectives"]["ar>mlm@0.25"]["predicted"]
    assert [p["steps"] for p in predicted] == [p["steps"] for p in measured]
    report = (out / "report.md").read_text()
    assert "### Objective schedules" in report and "| ar>mlm@0.25 | ar " in report
    main([*argv, "--resume"])  # every run is reused
    assert json.loads((out / "results.json").read_text())["runs"] == results["runs"]
