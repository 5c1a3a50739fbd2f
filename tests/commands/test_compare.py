import json
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from PIL import Image

from backbone import ConfigError
from bench.common.cli import run
from bench.common.stopping import EXIT_STOPPED
from bench.compare import build_parser, main
from tests.helpers import signalling

pytestmark = pytest.mark.slow  # the whole command end to end

TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "3e8", "--eval-points", "3",
        "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--quiet", "--seeds", "1",
        "--downstream", "synthetic:states,size=64,synthetic:topic,size=16", "--finetune-steps", "2",
        "--finetune-lrs", "1e-3"]
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds", "downstream_seconds",
           "revision")  # the revision moves with any edit of the tree while the tests run


def numbers(results: dict) -> list[dict]:
    return [{k: v for k, v in run.items() if k not in TIMINGS} for run in results["runs"]]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "report"
    main([*TINY, "--objectives", "mlm,ar,electra,span", "--seeds", "2", "--out", str(out)])
    return out


def test_report_sections_and_plots(comparison):
    report = (comparison / "report.md").read_text()
    for heading in ("## 1. Setup", "## 2. Signal density", "## 3. Compute", "## 4. Results at equal compute",
                    "## 5. Plots"):
        assert heading in report
    assert "python -m bench.compare" in report and "torch" in report and "git revision" in report
    assert report.index("## Answer") < report.index("## Verdict") < report.index("## 1. Setup")
    assert "### Distance to the Bayes floor" in report and "### Probes" in report
    assert "*untrained, causal*" in report and "*untrained, bidirectional*" in report and "*input only*" in report
    for png in ("loss_vs_flops.png", "excess_loss_vs_flops.png", "signal_density.png", "gains_forest.png"):
        assert f"]({png})" in report
        with Image.open(comparison / png) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] > 300


def test_results_json_fields(comparison):
    results = json.loads((comparison / "results.json").read_text())
    assert results["budget_flops"] == 3e8
    runs = results["runs"]
    assert [(r["objective"], r["seed"]) for r in runs] == [(o, s) for o in ("mlm", "ar", "electra", "span")
                                                          for s in (0, 1)]
    for result in runs:
        for key in ("objective", "seed", "steps", "flops", "tokens", "supervised_positions", "wall_seconds", "curve"):
            assert key in result
        assert 3e8 <= result["flops"] < 3e8 + result["flops_per_step"]
        assert all("flops" in point and "loss" in point["metrics"] for point in result["curve"])
    bayes = results["bayes"]
    assert set(bayes["floors"]) == {"mlm", "ar", "electra", "span"} and bayes["floors"]["span"]["loss"] > 0
    assert set(bayes["input_only"]) == {"smoothing", "filtering"}
    for result in runs + results["controls"]:
        probes = result["probes"]
        assert {"hidden_state", "replaced_word", "replaced_word_finetuned", "probe_flops"} <= set(probes)
        assert all(0 <= probes[key]["score"] <= 1 for key in ("hidden_state", "replaced_word"))
        assert result["revision"] == runs[0]["revision"]  # every run and control records the code that made it
    assert results["schema"] == 4 and set(results["answer"]) >= {"sentence", "yardstick", "leader", "separated",
                                                                  "scale"}
    # one control per seed and way of reading: mlm, electra and span read the whole window, ar the left context
    assert [(c["control"], c["seed"], c["flops"]) for c in results["controls"]] == [
        (name, seed, 0) for name in ("untrained, bidirectional", "untrained, causal") for seed in (0, 1)]
    assert {r["objective"]: r["control"] for r in runs}["ar"] == "untrained, causal"
    by_name = {r["objective"]: r for r in runs if r["seed"] == 0}
    assert by_name["ar"]["supervised_positions"] == by_name["ar"]["steps"] * 4 * 31
    assert by_name["mlm"]["supervised_positions"] == by_name["mlm"]["steps"] * 4 * 5  # round(0.15 · 32)


def test_same_config_same_numbers_and_resume_keeps_finished_runs(comparison, tmp_path):
    again = tmp_path / "again"
    main([*TINY, "--objectives", "mlm,ar,electra,span", "--seeds", "2", "--out", str(again)])
    first = json.loads((comparison / "results.json").read_text())
    assert numbers(json.loads((again / "results.json").read_text())) == numbers(first)
    # resuming a finished comparison trains nothing and reproduces the same results, timings included
    before = json.loads((again / "results.json").read_text())["runs"]
    main([*TINY, "--objectives", "mlm,ar,electra,span", "--seeds", "2", "--out", str(again), "--resume"])
    assert json.loads((again / "results.json").read_text())["runs"] == before


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.compare", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, message", [
    (["--objectives", "mlm,bert"], "unknown objective 'bert'"),
    (["--objectives", "mlm:rate=1.2"], "mlm rate must be in"),
    (["--budget", "-1"], "--budget must be a positive"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--model", "giant"], "unknown --model"),
    (["--data", "nowhere:x"], "unknown data source"),
    (["--objectives", "span", "--seq-len", "5"], "too short"),
    (["--precision", "8-bit"], "invalid choice"),
    (["--precision", "16-mixed"], "needs a GPU"),
    (["--strategy", "ddp_spawn"], "not supported"),
    (["--objectives", "mlm,mlm:rate=0.15"], "listed twice"),
    (["--data", "synthetic:successors=99"], "successors"),
    (["--data", "synthetic:text,successors=99"], "successors"),
    (["--model", "small", "--batch-size", "32", "--seq-len", "100000"], "GiB"),
    (["--model", "tiny:d_model=0"], "d_model must be >= 1"),
    (["--model", "tiny:width=3"], "is not KEY=VALUE"),
    (["--model", "tiny:n_layer=two"], "not a valid int"),
    (["--data", "synthetic:text,train=64,heldout=16,words=64,lexicon=8", "--vocab-size", "3"],
     "--vocab-size must be >= 7"),
    (["--seq-len", "0"], "--seq-len must be >= 2, got 0"),
    (["--seq-len", "16:0.9,32:0.2"], "the shares sum to 1.1, not 1"),
    (["--seq-len", "16:0,32:1"], "share 0 of length 16 must be a positive fraction"),
    (["--seq-len", "16:-0.5,32:1.5"], "share -0.5 of length 16 must be a positive fraction"),
    (["--seq-len", "1:0.5,32:0.5"], "length 1 must be a whole number >= 2"),
    (["--seq-len", "16;0.5,32:0.5"], "is not LENGTH:SHARE"),
    (["--objectives", "span", "--seq-len", "4:0.5,32:0.5"], "too short"),
    (["--seq-len", "16:0.999,32:0.001"], "phase 32:0.001 gets no step of mlm"),
    (["--model", "small", "--batch-size", "32", "--seq-len", "16:0.5,100000:0.5"], "GiB"),  # the longest phase's
])
def test_bad_input_is_one_line_with_status_2_and_writes_nothing(args, message, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*TINY, *args, "--out", str(out)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_batch_that_does_not_split_over_processes_is_one_line(tmp_path):
    result = run_cli(*TINY, "--batch-size", "3", "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu",
                     "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: --batch-size 3 does not split evenly over 2 processes"]
    assert not (tmp_path / "out").exists()


def test_json_files_hold_no_nan(comparison):
    def reject(constant):
        raise ValueError(f"{constant} is not JSON")
    for path in [comparison / "results.json", *comparison.glob("runs/*/*.json"), *comparison.glob("runs/*/*.jsonl")]:
        for line in ([path.read_text()] if path.suffix == ".json" else path.read_text().splitlines()):
            json.loads(line, parse_constant=reject)
    controls = json.loads((comparison / "results.json").read_text())["verdict"]["yardsticks"][0]["controls"]
    assert all(c["p"] is None for c in controls)  # a missing number (a mean has no test) is null


def test_a_diverged_run_is_reported_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    import bench.training.loop
    real_step = bench.training.loop.train_step

    def diverging(fabric, run, batch, loss_counts, budget=None):
        loss = real_step(fabric, run, batch, loss_counts, budget)
        return loss * float("nan") if run.spec == "ar" and run.counters.step == 2 else loss

    monkeypatch.setattr(bench.training.loop, "train_step", diverging)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*TINY, "--objectives", "mlm,ar", "--out", str(out), "--no-probes"])
    assert exit_info.value.code == 3
    assert "ar seed 0 diverged: the loss became nan at step 2" in capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert [r["objective"] for r in results["runs"]] == ["mlm"]
    assert results["diverged"][0]["step"] == 2 and results["diverged"][0]["last_finite_loss"] > 0
    assert "### Diverged runs" in (out / "report.md").read_text()


def test_model_overrides_are_recorded(tmp_path):
    out = tmp_path / "shape"
    main([*TINY, "--model", "tiny:d_model=16,n_layer=1", "--objectives", "ar", "--out", str(out), "--no-probes"])
    assert json.loads((out / "config.json").read_text())["derived"]["model_shape"]["d_model"] == 16
    assert "n_layer 1, d_model 16" in (out / "report.md").read_text()


def test_bad_input_from_the_shell_has_no_traceback(tmp_path):
    result = run_cli(*TINY, "--objectives", "mlm:rate=7", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.startswith("error: mlm rate must be in")
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_an_existing_comparison_needs_resume(comparison, capsys):
    for extra, message in (([], "--resume"), (["--resume", "--budget", "1e9"], "training.budget")):
        with pytest.raises(SystemExit):
            run(main, [*TINY, "--out", str(comparison), *extra])
        assert message in capsys.readouterr().err


def test_resume_may_change_how_steps_run_but_not_what_they_compute(comparison, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(comparison, copy)
    before = json.loads((copy / "results.json").read_text())
    # every run is finished: a resume with another micro-batch and checkpointing only rewrites the report
    main([*TINY, "--objectives", "mlm,ar,electra,span", "--seeds", "2", "--out", str(copy), "--resume",
          "--micro-batch", "2", "--activation-checkpointing"])
    assert numbers(json.loads((copy / "results.json").read_text())) == numbers(before)
    assert json.loads((copy / "config.json").read_text())["execution"]["hardware"]["micro_batch"] == 2
    # a folder of another config.json layout is refused in one line, not misread
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "schema": 1}))
    with pytest.raises(ConfigError, match="config schema 1"):
        main([*TINY, "--objectives", "mlm,ar,electra,span", "--seeds", "2", "--out", str(copy), "--resume"])


def test_config_reruns_a_comparisons_settings_and_explicit_flags_override_them(comparison, tmp_path):
    from bench.compare import parse_config
    from bench.orchestration.planning import make_plan
    from bench.training.distributed import make_fabric

    saved = json.loads((comparison / "config.json").read_text())
    assert saved["config"]["model"]["seq_len"] == "32"
    config = parse_config(["--config", str(comparison), "--out", str(tmp_path / "again")])
    assert config.training.seeds == 2  # recorded with how the steps ran
    assert dict(config.training.rates) == saved["derived"]["learning_rates"]  # the rates it ran with
    settings = make_plan(config, make_fabric("cpu", launch=False)).settings
    assert settings["derived"] == saved["derived"]
    unrated = lambda section: {k: v for k, v in section.items() if k != "rates"}  # noqa: E731
    assert unrated(settings["config"]["training"]) == unrated(saved["config"]["training"])
    config = parse_config(["--config", str(comparison / "config.json"), "--budget", "1e9", "--seeds", "1",
                           "--out", str(tmp_path / "changed")])
    changed = make_plan(config, make_fabric("cpu", launch=False)).settings
    assert config.training.seeds == 1 and changed["config"]["training"]["budget"] == 1e9
    with pytest.raises(ConfigError, match="not a comparison's config.json"):
        parse_config(["--config", str(comparison / "report.md")])


def test_help_explains_every_flag():
    result = run_cli("--help")
    assert result.returncode == 0 and "exit status" in result.stdout and "3 the report" in result.stdout
    actions = [a for a in build_parser()._actions if "--help" not in a.option_strings]
    assert len(actions) >= 20
    for action in actions:
        flag = action.option_strings[0]
        assert action.help, f"{flag} has no help"
        if action.default not in (None, False):  # a flag with a default says what it is
            assert "(default" in action.help, f"{flag} does not state its default"
        assert flag in result.stdout


def test_objectives_are_reported_by_the_spec_as_written(tmp_path):
    out = tmp_path / "named"
    main([*TINY, "--objectives", "mlm:whole_word=yes,ar:", "--out", str(out), "--no-probes"])
    results = json.loads((out / "results.json").read_text())
    assert [row["objective"] for row in results["positions"]] == ["mlm:whole_word=yes", "ar:"]
    assert "| mlm:whole_word=yes " in (out / "report.md").read_text()


def test_out_must_be_a_writable_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        run(main, [*TINY, "--out", str(tmp_path / "file")])
    assert "is a file" in capsys.readouterr().err


def test_verdict_and_multipliers_are_in_results_and_report(comparison):
    results = json.loads((comparison / "results.json").read_text())
    verdict = results["verdict"]
    assert verdict["baseline"] == "mlm" and verdict["main"] == "neutral_average_frozen"
    names = [y["yardstick"] for y in verdict["yardsticks"]]
    tasks = ["synthetic:states,size=64", "synthetic:topic,size=16"]
    assert names == ["neutral_average_frozen", *(f"{t} (frozen)" for t in tasks), "neutral_average_finetuned",
                     *(f"{t} (finetuned)" for t in tasks), "hidden_state_share", "replaced_word_share",
                     "replaced_word_finetuned_share"]
    for yardstick in verdict["yardsticks"]:
        assert sorted(row["objective"] for row in yardstick["rows"]) == ["ar", "electra", "mlm", "span"]
        assert sorted((g["objective"], g["control"]) for g in yardstick["gains"]) == [
            ("ar", "untrained, causal"), ("electra", "untrained, bidirectional"), ("mlm", "untrained, bidirectional"),
            ("span", "untrained, bidirectional")]
        assert yardstick["gain_family"]["size"] == 4 and yardstick["n_test"]["examples"] > 0
        # the probes copy the objectives' own training; the tasks copy nothing
        assert bool(yardstick["mirrors"]) == yardstick["yardstick"].endswith("_share")
    # multipliers come only from the neutral yardsticks read at every checkpoint, for every objective against mlm
    assert {(m["objective"], m["yardstick"]) for m in verdict["multipliers"]} == {
        (spec, name) for spec in ("ar", "electra", "span") for name in names[:3]}
    assert results["answer"]["yardstick"] == "neutral_average_frozen"
    density = verdict["signal_density_ratio"]["ar"]
    positions = {row["objective"]: row["supervised_positions"] for row in results["positions"]}
    assert density["per_sequence"] == pytest.approx(positions["ar"] / positions["mlm"])
    compute = {o["objective"]: o["compute"] for o in results["objectives"]}
    assert density["per_flop"] == pytest.approx(compute["ar"]["supervised_positions"] / compute["ar"]["flops"] /
                                                (compute["mlm"]["supervised_positions"] / compute["mlm"]["flops"]))
    report = (comparison / "report.md").read_text()
    assert results["answer"]["sentence"] in report and "yardsticks_vs_flops.png" in report


def test_unigram_loss_and_discriminator_baselines_are_reported(comparison):
    results = json.loads((comparison / "results.json").read_text())
    by_name = {o["objective"]: o for o in results["objectives"]}
    for spec, metric in (("mlm", "loss"), ("ar", "loss"), ("electra", "generator_loss")):
        item = by_name[spec]["floors"][metric]
        assert item["unigram"] > item["floor"]
        closed = (item["unigram"] - item["value"]["mean"]) / (item["unigram"] - item["floor"])
        assert item["closed"]["mean"] == pytest.approx(closed)
    electra = by_name["electra"]["metrics"]
    assert 0 <= electra["discriminator_auc"]["mean"] <= 1
    replaced = electra["replaced_fraction"]["mean"]
    assert electra["trivial_accuracy"]["mean"] == pytest.approx(1 - replaced)
    assert "ROC AUC" in (comparison / "report.md").read_text()


@pytest.mark.parametrize("text, expected", [
    ("1e-3", {"mlm": 1e-3, "ar": 1e-3, "mlm:rate=0.4": 1e-3}),
    ("1e-3,mlm=2e-3", {"mlm": 2e-3, "ar": 1e-3, "mlm:rate=0.4": 2e-3}),
    ("1e-3,mlm=2e-3,mlm:rate=0.4=5e-3", {"mlm": 2e-3, "ar": 1e-3, "mlm:rate=0.4": 5e-3}),
    ("mlm=2e-3,ar=1e-4", {"mlm": 2e-3, "ar": 1e-4, "mlm:rate=0.4": 2e-3}),
])
def test_per_objective_learning_rates(text, expected):
    from bench.orchestration.planning import learning_rates
    assert learning_rates(text, ["mlm", "ar", "mlm:rate=0.4"]) == expected


@pytest.mark.parametrize("text, message", [("x", "not a number"), ("-1", "positive"), ("1e-3,2e-3", "more than one"),
                                           ("1e-3,bert=1", "not among"), ("ar=1e-3", "no rate for")])
def test_bad_learning_rates_are_one_line(text, message):
    from backbone import ConfigError
    from bench.orchestration.planning import learning_rates
    with pytest.raises(ConfigError, match=message):
        learning_rates(text, ["mlm", "ar"])


def test_when_every_run_diverges_the_report_still_says_so(tmp_path, monkeypatch):
    import bench.training.loop
    monkeypatch.setattr(bench.training.loop, "train_step",
                        lambda fabric, run, batch, counts, budget=None: torch.tensor(float("nan")))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*TINY, "--objectives", "mlm,ar", "--out", str(out), "--no-probes"])
    assert exit_info.value.code == 3
    results = json.loads((out / "results.json").read_text())
    assert results["runs"] == [] and len(results["diverged"]) == 2 and results["verdict"] is None
    report = (out / "report.md").read_text()
    assert "### Diverged runs" in report and "No verdict" in report


def test_small_gpu_steps_are_warned_about(capsys):
    from types import SimpleNamespace

    import torch as torch_module

    from bench.orchestration.pipeline import warn_small_steps

    gpu = SimpleNamespace(device=torch_module.device("cuda", 0), world_size=8)
    warn_small_steps(gpu, 256, 128)  # 32 windows of 128 per process: 4,096 tokens
    assert "4,096 tokens" in capsys.readouterr().err
    warn_small_steps(gpu, 256, 512)  # 16,384 tokens per process
    warn_small_steps(SimpleNamespace(device=torch_module.device("cpu"), world_size=1), 4, 16)
    assert capsys.readouterr().err == ""


def test_bf16_on_a_gpu_without_bf16_units_is_refused(monkeypatch):
    from bench.compare import parse_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # torch counts emulation as support (True on V100 and T4) unless asked not to
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    with pytest.raises(ConfigError, match="Tesla V100.*no bf16 units; use 16-mixed"):
        parse_config(["--accelerator", "cuda", "--precision", "bf16-mixed"])
    parse_config(["--accelerator", "cuda", "--precision", "16-mixed"])


def test_a_sequence_length_schedule_is_recorded_reported_and_resumes(tmp_path, capsys):
    from bench.compare import parse_config
    from bench.orchestration.planning import make_plan
    from bench.training.distributed import make_fabric

    out = tmp_path / "schedule"
    flags = [*TINY, "--seq-len", "16:0.6,32:0.4", "--objectives", "mlm,ar", "--no-probes", "--budget", "4e8"]
    main([*flags, "--out", str(out)])
    settings = json.loads((out / "config.json").read_text())
    assert settings["config"]["model"]["seq_len"] == "16:0.6,32:0.4"
    results = json.loads((out / "results.json").read_text())
    assert results["seq_len"] == 32  # evaluated, and the density table, at the last phase's length
    accounting, measured = results["seq_len_accounting"], results["seq_len_measured"]
    for record in results["runs"]:
        phases = record["phases"]
        assert [p["seq_len"] for p in phases] == [16, 32] and all(p["steps"] > 0 for p in phases)
        assert sum(p["flops"] for p in phases) == record["flops"]
        predicted = accounting["objectives"][record["objective"]]["predicted"]
        assert [p["steps"] for p in phases] == [p["steps"] for p in predicted]
        assert measured[record["objective"]] == phases  # one seed: the mean is the run's own
        assert record["supervised_per_sequence"] == (31 if record["objective"] == "ar" else 5)  # at T = 32
    throughout = accounting["objectives"]["ar"]["final_throughout"]
    assert throughout["seq_len"] == 32 and throughout["tokens"] == throughout["steps"] * 4 * 32
    report = (out / "report.md").read_text()
    assert "### Sequence-length schedule" in report and "T = 32 throughout" in report
    assert "| sequence length     | 16:0.6,32:0.4: T = 16 for 0.6, then T = 32 for 0.4 of each run's FLOPs" in report
    # --config reruns it with the same settings; --resume keeps the finished runs; another schedule is refused
    config = parse_config(["--config", str(out), "--out", str(tmp_path / "again")])
    rerun = make_plan(config, make_fabric("cpu", launch=False)).settings
    assert rerun["derived"] == settings["derived"] and rerun["config"]["model"] == settings["config"]["model"]
    before = results["runs"]
    main([*flags, "--out", str(out), "--resume"])
    assert json.loads((out / "results.json").read_text())["runs"] == before
    with pytest.raises(SystemExit):
        run(main, [*flags, "--seq-len", "16:0.5,32:0.5", "--out", str(out), "--resume"])
    assert "different settings" in capsys.readouterr().err


def test_a_rerun_or_resume_on_other_versions_warns_in_one_line_and_reads_the_folders_tokenizer(tmp_path, capsys,
                                                                                               monkeypatch):
    import bench.data.text
    import bench.orchestration.pipeline
    import bench.orchestration.planning
    from bench.common.environment import package_versions
    from bench.report.setup import setup_table

    def setup(folder):  # the report's setup table, worded from results.json's facts
        return setup_table(json.loads((folder / "results.json").read_text())["setup"])

    corpus = tmp_path / "data" / "corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("".join(f"the {w} of {w}ing and {w}s to {w}er world\n" for w in
                              ("walk", "talk", "sing", "read", "play", "work", "jump", "cook") * 40))
    flags = ["--model", "tiny", "--seq-len", "16", "--batch-size", "4", "--budget", "2e8", "--eval-points", "2",
             "--data", f"text:{corpus}", "--vocab-size", "60", "--objectives", "mlm", "--seeds", "1", "--quiet"]
    first = tmp_path / "first"
    main([*flags, "--out", str(first)])
    installed = package_versions()
    assert json.loads((first / "config.json").read_text())["versions"] == installed
    table = setup(first)
    assert table["environment"].startswith(f"python {installed['python']}, torch {installed['torch']}, "
                                           f"lightning-fabric {installed['lightning-fabric']}")
    trained = table["tokenizer"]
    assert "trained on the training documents" in trained and "sha256 " in trained
    assert "warning" not in capsys.readouterr().err

    # another machine: other versions, and no cached tokenizer (training one would give other pieces elsewhere)
    other = {**installed, "torch": "9.9.9"}
    monkeypatch.setattr(bench.orchestration.planning, "package_versions", lambda: other)
    monkeypatch.setattr(bench.orchestration.pipeline, "package_versions", lambda: other)
    shutil.rmtree(corpus.parent / ".objective-bench")
    monkeypatch.setattr(bench.data.text, "train_tokenizer",
                        lambda *a, **k: pytest.fail("the tokenizer was trained again"))
    again = tmp_path / "again"
    main(["--config", str(first), "--out", str(again), "--quiet"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and f"torch {installed['torch']} → 9.9.9" in warnings[0], warnings
    assert (again / "tokenizer.json").read_text() == (first / "tokenizer.json").read_text()
    table = setup(again)
    assert "reused by --config" in table["tokenizer"] and trained.split("sha256 ")[1][:12] in table["tokenizer"]
    assert "torch 9.9.9" in table["environment"] and "was made with other package versions" in table["environment"]
    assert json.loads((again / "config.json").read_text())["versions"] == other
    assert numbers(json.loads((again / "results.json").read_text())) == \
        numbers(json.loads((first / "results.json").read_text()))

    # --resume on other versions: the versions it was started with stay recorded, the later session is listed
    main([*flags, "--out", str(first), "--resume"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and str(first) in warnings[0]
    config = json.loads((first / "config.json").read_text())
    assert config["versions"] == installed and config["resumed_with"] == [other]
    assert "reused by --resume" in setup(first)["tokenizer"]


def test_a_signal_anywhere_in_the_command_stops_it_at_the_next_safe_point_and_resume_finishes_it(tmp_path,
                                                                                                  monkeypatch):
    # the handler lives for the whole command: a SIGTERM during a run's final probes, the Bayes references or a
    # control is honoured at the next batch, fit or step, and the phase's unfinished work is dropped
    import bench.orchestration.works
    import bench.orchestration.pipeline
    import bench.yardsticks.probes

    flags = [*TINY, "--objectives", "mlm", "--seeds", "2"]
    main([*flags, "--out", str(tmp_path / "straight")])
    # the final probes (the curves' frozen probes skip fine-tuning)
    final_probes = signalling(bench.yardsticks.probes.run_probes, lambda *args, finetune=True: finetune)
    stopped = tmp_path / "stopped"
    with monkeypatch.context() as patch:
        patch.setattr(bench.yardsticks.probes, "run_probes", final_probes)
        with pytest.raises(SystemExit) as exit_info:
            main([*flags, "--out", str(stopped)])
    assert exit_info.value.code == EXIT_STOPPED  # the run's training is saved, its probes are not
    assert (stopped / "runs" / "mlm-seed0" / "checkpoint.pt").exists()
    assert not (stopped / "runs" / "mlm-seed0" / "result.json").exists()
    assert not (stopped / "runs" / "mlm-seed1").exists()

    with monkeypatch.context() as patch:
        pipeline = bench.orchestration.pipeline
        patch.setattr(pipeline, "bayes_references", signalling(pipeline.bayes_references))
        with pytest.raises(SystemExit) as exit_info:
            main([*flags, "--out", str(stopped), "--resume"])
    assert exit_info.value.code == EXIT_STOPPED and not (stopped / "runs" / "mlm-seed1").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the command's handler is gone with it

    # during the first untrained control (after the runs): it stops at its first fit, and nothing of it is written
    with monkeypatch.context() as patch:
        patch.setattr(bench.orchestration.works, "control_run", signalling(bench.orchestration.works.control_run))
        with pytest.raises(SystemExit) as exit_info:
            main([*flags, "--out", str(stopped), "--resume"])
    runs = stopped / "runs"
    assert exit_info.value.code == EXIT_STOPPED
    assert (runs / "mlm-seed0" / "result.json").exists() and (runs / "mlm-seed1" / "result.json").exists()
    assert not any((runs / f"untrained-bidirectional-seed{seed}" / "result.json").exists() for seed in (0, 1))
    main([*flags, "--out", str(stopped), "--resume"])
    resumed, straight = (json.loads((folder / "results.json").read_text())
                         for folder in (stopped, tmp_path / "straight"))
    assert numbers(resumed) == numbers(straight)
    assert [{k: v for k, v in c.items() if k != "wall_seconds"} for c in resumed["controls"]] == \
        [{k: v for k, v in c.items() if k != "wall_seconds"} for c in straight["controls"]]


def test_the_report_says_where_the_wall_time_went(comparison):
    results = json.loads((comparison / "results.json").read_text())
    runs = {record["objective"]: [] for record in results["runs"]}
    for record in results["runs"]:
        runs[record["objective"]].append(record)
    for summary in results["objectives"]:
        spent, own = summary["compute"], runs[summary["objective"]]
        assert spent["train_seconds"] + spent["checkpoint_seconds"] == pytest.approx(
            sum(r["wall_seconds"] for r in own) / len(own))
        assert spent["final_seconds"] == pytest.approx(sum(r["probe_seconds"] + r["downstream_seconds"]
                                                           for r in own) / len(own))
    assert "The evaluations took " in (comparison / "report.md").read_text()
