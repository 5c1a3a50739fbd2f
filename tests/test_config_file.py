"""bench.training.config_file: the one schema of config.json, checked without training anything."""

import pytest

from bench.compare import build_parser
from bench.training import config_file
from bench.training.config import TrainConfig

# what plan() writes for a CPU comparison without downstream tasks: every setting and fixed entry
RECORDED = {"data": "synthetic", "seq_len": 64, "text_field": "text", "vocab_size": 8192, "tokenizer": None,
            "precision": "32-true", "budget_flops": 8e11, "model": "mini", "batch_size": 32, "warmup": 0.05,
            "min_lr_ratio": 0.1, "weight_decay": 0.01, "grad_clip": 1.0, "eval_points": 6, "first_eval": 0.05,
            "eval_windows": 128, "probe_every_eval": True, "compile": False, "model_shape": {"n_layer": 2},
            "learning_rates": {"mlm": 0.003, "ar": 0.006}, "lr_sweep": None, "sweep_fraction": 0.25, "probes": True,
            "flops": "dense", "tf32": False, "downstream": None}


def test_every_flag_of_bench_compare_is_recorded_or_said_not_to_be():
    flags = {action.dest for action in build_parser()._actions}
    in_schema = {flag for entry in config_file.SCHEMA for flag in entry.flags}
    assert flags == in_schema | set(config_file.NOT_RECORDED), (flags ^ (in_schema | set(config_file.NOT_RECORDED)))
    assert not in_schema & set(config_file.NOT_RECORDED)


def test_record_keeps_the_schemas_order_and_leaves_out_optional_entries_at_their_absent_value():
    written = config_file.record(dict(reversed(list(RECORDED.items()))))
    assert list(written) == [key for key in RECORDED if key not in ("flops", "tf32", "downstream")]
    assert config_file.record({**RECORDED, "flops": "executed"})["flops"] == "executed"
    tasks = {"tasks": ["synthetic:tagging"], "finetune_steps": 150, "finetune_lrs": [0.001, 0.003]}
    assert config_file.record({**RECORDED, "tf32": True, "downstream": tasks})["downstream"] == tasks
    with pytest.raises(ValueError, match=r"unknown \['colour'\], missing \['model_shape'\]"):
        config_file.record({**{k: v for k, v in RECORDED.items() if k != "model_shape"}, "colour": "red"})


def test_flag_defaults_invert_the_record():
    tasks = {"tasks": ["synthetic:tagging", "synthetic:order"], "finetune_steps": 20, "finetune_lrs": [0.001, 0.01]}
    saved = {**config_file.record({**RECORDED, "downstream": tasks}),
             "execution": {"micro_batch": 4, "activation_checkpointing": True, "checkpoint_every": None,
                           "log_every": 10, "retired_flag": 1}}
    defaults = config_file.flag_defaults(saved)
    assert defaults == {"data": "synthetic", "seq_len": 64, "text_field": "text", "vocab_size": 8192,
                        "tokenizer": None, "precision": "32-true", "budget": 8e11, "model": "mini", "batch_size": 32,
                        "eval_points": 6, "no_probe_curves": False, "compile": False, "objectives": "mlm,ar",
                        "lr_sweep": None, "sweep_fraction": 0.25, "no_probes": False,
                        "downstream": "synthetic:tagging,synthetic:order", "finetune_steps": 20,
                        "finetune_lrs": "0.001,0.01", "micro_batch": 4, "activation_checkpointing": True,
                        "checkpoint_every": None, "log_every": 10, "flops": "dense"}
    # an older folder: no execution, no downstream, no tf32 recorded; a required key missing is a KeyError
    older = config_file.record(RECORDED)
    assert "micro_batch" not in config_file.flag_defaults(older) and "downstream" not in config_file.flag_defaults(older)
    with pytest.raises(KeyError, match="model"):
        config_file.flag_defaults({k: v for k, v in older.items() if k != "model"})


def test_resume_compares_settings_with_older_folders_missing_keys_read_as_their_absent_value():
    now = {**config_file.record(RECORDED), "execution": {"micro_batch": None}, "versions": {"torch": "2.14"}}
    older = {k: v for k, v in now.items() if k not in ("execution", "versions")}  # before those were recorded
    assert config_file.changed(older, now) == []
    assert config_file.changed({**older, "tf32": False}, now) == []  # absent means False
    assert config_file.changed({**older, "tf32": True}, now) == ["tf32"]
    assert config_file.changed(older, config_file.record({**RECORDED, "flops": "executed"})) == ["flops"]
    assert config_file.changed({**older, "budget_flops": 1e9, "resumed_with": []}, now) == ["budget_flops"]
    assert config_file.changed({k: v for k, v in older.items() if k != "model_shape"}, now) == ["model_shape"]
    assert config_file.changed({**older, "colour": "red"}, now) == ["colour"]  # a key this version does not know


def test_fixed_entries_recorded_with_another_value_are_named():
    saved = config_file.record({**RECORDED, "warmup": 0.1})
    assert config_file.fixed_changes(saved, TrainConfig) == [f"warmup 0.1 (now {TrainConfig.warmup})"]
    assert config_file.fixed_changes({k: v for k, v in saved.items() if k != "warmup"}, TrainConfig) == []
