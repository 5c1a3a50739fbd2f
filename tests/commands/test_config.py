"""bench.orchestration.config: the one typed configuration, built from the flags, serialised as config.json and diffed
by --resume; checked without training anything."""

import pytest

from backbone import ConfigError
from bench.compare import build_parser, parse_config
from bench.orchestration.config import COMMAND, EXECUTION, SETTING, Config, changed_settings, validate


def test_every_flag_of_bench_compare_is_one_field_of_the_configuration():
    flags = {action.dest for action in build_parser()._actions} - {"help"}
    fields = set(Config().flags())
    # the fields no flag sets: what a --config rerun carries over (rates, the folder's tokenizer)
    assert flags == fields - {"rates", "reused_tokenizer"}


def test_the_flags_become_the_tree_and_the_tree_gives_them_back():
    config = parse_config(["--objectives", "mlm,ar", "--budget", "1e9", "--micro-batch", "4", "--out", "x"])
    assert config.training.objectives == "mlm,ar" and config.training.budget == 1e9
    assert config.hardware.micro_batch == 4 and str(config.output.out) == "x"
    assert config.command == ("--objectives", "mlm,ar", "--budget", "1e9", "--micro-batch", "4", "--out", "x")
    assert Config.from_flags(config.flags(), config.command) == config
    assert config.with_flags(budget=2e9).training.budget == 2e9 and config.training.budget == 1e9  # frozen
    with pytest.raises(ValueError, match="colour"):
        Config.from_flags({"colour": "red"})


def test_config_json_records_settings_apart_from_how_the_steps_run_and_reruns_from_them():
    config = parse_config(["--budget", "1e9", "--micro-batch", "4", "--seeds", "3", "--out", "x"])
    settings, execution = config.recorded(SETTING), config.recorded(EXECUTION)
    assert settings["training"]["budget"] == 1e9 and "micro_batch" not in settings.get("hardware", {})
    assert execution["hardware"]["micro_batch"] == 4 and execution["training"]["seeds"] == 3
    assert "out" not in str(config.recorded(SETTING, EXECUTION))  # where to write is this command's alone
    assert config.recorded(COMMAND)["output"]["out"] == "x"
    back = Config.from_recorded({**settings, **{k: {**settings.get(k, {}), **v} for k, v in execution.items()}})
    assert Config.from_flags(back).recorded(SETTING, EXECUTION) == config.recorded(SETTING, EXECUTION)


def test_resume_names_each_setting_that_changed():
    before, after = Config().recorded(SETTING), Config().with_flags(budget=1e9, micro_batch=2).recorded(SETTING)
    assert changed_settings(before, before) == [] and changed_settings(before, after) == ["training.budget"]
    assert changed_settings({**before, "extra": {"colour": 1}}, before) == ["extra.colour"]


@pytest.mark.parametrize("flags, message", [
    (["--seeds", "0"], "--seeds must be >= 1"), (["--budget", "-1"], "--budget must be a positive"),
    (["--strategy", "fsdp"], "not supported"),
    (["--accelerator", "cpu", "--precision", "16-mixed"], "needs a GPU"),
    # a text flag the corpus has no use for would be accepted and do nothing
    (["--data", "synthetic", "--text-field", "body"], "--text-field body does nothing with --data synthetic"),
    (["--data", "synthetic:words=64", "--vocab-size", "2048"], "--vocab-size 2048 does nothing with --data synthetic"),
    (["--tokenizer", "tokenizer.json"], "--tokenizer tokenizer.json does nothing with --data synthetic"),
    (["--num-proc", "4"], "--num-proc 4 does nothing with --data synthetic"),
    (["--data", "synthetic:text", "--text-field", "body"], "does nothing with --data synthetic:text")])
def test_a_mistake_is_one_line_before_anything_runs(flags, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(flags)
    with pytest.raises(ConfigError, match=message):  # the same check of a configuration built in code
        validate(Config.from_flags({**Config().flags(), **parse_flags(flags)}))


def test_an_ignored_text_flag_is_one_line_and_status_2(capsys, tmp_path):
    from bench.common.cli import run
    from bench.compare import main
    tiny = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "3e8", "--eval-points", "1",
            "--seeds", "1", "--objectives", "ar", "--no-probes", "--downstream", "none", "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*tiny, "--data", "synthetic:words=64", "--text-field", "body", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and not (tmp_path / "out").exists()
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --text-field body does nothing with --data synthetic:words=64: it applies to text:/hf: corpora; "
        "drop it"]


def test_the_text_flags_a_corpus_uses_are_accepted():
    parse_config(["--data", "text:corpus.jsonl", "--text-field", "body", "--vocab-size", "2048", "--num-proc", "2",
                  "--tokenizer", "tokenizer.json"])
    # synthetic:text trains its WordPiece vocabulary (capped at half its words) on its own file, tokenized in processes
    parse_config(["--data", "synthetic:text", "--vocab-size", "64", "--num-proc", "2", "--tokenizer", "t.json"])


def parse_flags(flags: list[str]) -> dict:
    args = vars(build_parser().parse_args(flags))
    return {**args, "seq_len": str(args["seq_len"]), "budgets": tuple(args["budgets"] or ())}
