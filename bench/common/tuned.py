"""The default comparison's tuned settings: what `python -m bench.tune --write-defaults` chose on validation data
(reports/tuning/report.md), read from bench/common/tuned.json. Its objectives and peak rates are the default's; its
fine-tuning rates, one per reader (an objective's spec, an untrained control's name) and task, apply where a
comparison's setting is the one tuned (else every backbone is fine-tuned at each rate of a grid, the dev split
choosing). Where a comparison's peak rates come from, said in its report, is worded from `provenance`.
"""

from __future__ import annotations

import json
from pathlib import Path

from objectives import parse_objective_list

DEFAULTS_FILE = Path(__file__).with_name("tuned.json")
TUNED = json.loads(DEFAULTS_FILE.read_text())


def swept_specs(record: Path = DEFAULTS_FILE.parents[2] / TUNED["report"]) -> tuple[str, ...]:
    """Every spec the tuning behind the defaults trained a trial of, picked or not, as its record holds them (the
    results.json beside its report: tuned.json keeps the picks alone, and ELECTRA's trials try λ = 10 and λ = 50).
    Without that record (a copy of the package without reports/), or with one of another setting, only the picks are
    known to have been tried."""
    found = record.with_name("results.json")
    picks = tuple(parse_objective_list(TUNED["objectives"]))
    if not found.is_file():
        return picks
    data = json.loads(found.read_text())
    if data.get("setting") != TUNED["setting"]:
        return picks
    return tuple(dict.fromkeys([*picks, *(trial["trial"] for tuned in data["objectives"].values()
                                          for trial in tuned["trials"])]))


# The tuning that chose the built-in default rates (bench.orchestration.config.TrainingConfig.lr, from
# bench/common/tuned.json): redo it (`python -m bench.tune --write-defaults`) when the default setting changes.
DEFAULT_TUNING = {"command": TUNED["made_by"],
                  "setting": {key: TUNED["setting"][key]
                              for key in ("budget", "seq_len", "model", "batch_size", "data")},
                  "objectives": parse_objective_list(TUNED["objectives"])}


def provenance(lr: str, default_lr: str, setting: dict, specs: list[str],
               swept: tuple[str, ...] | None = None) -> dict:
    """Where a comparison's peak rates come from: the user's --lr, or the tuning that chose the built-in default
    (DEFAULT_TUNING), with how this comparison's setting differs from that one's, the objectives it tried but did not
    pick (ELECTRA at λ = 50, say: its trials are in the tuning's report) and those it never tried (`swept`: every spec
    the tuning trained, by default its record's)."""
    if lr != default_lr:
        return {"kind": "given"}
    differs = [f"{key} {setting[key]} (swept at {value})" for key, value in DEFAULT_TUNING["setting"].items()
               if str(setting.get(key)) != str(value)]
    swept = swept_specs() if swept is None else swept
    unpicked = [spec for spec in specs if spec not in DEFAULT_TUNING["objectives"]]
    return {"kind": "borrowed", "from": DEFAULT_TUNING, "differs": differs,
            "never_swept": [spec for spec in unpicked if spec not in swept],
            "swept_not_picked": [spec for spec in unpicked if spec in swept]}
