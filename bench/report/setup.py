"""The report's setup table, worded from the facts a comparison gathered (bench.orchestration.pipeline.setup_facts), and
a budget sweep's (bench.orchestration.pipeline.sweep_facts)."""

from __future__ import annotations

import shlex

from bench.common.environment import describe as describe_versions


def rates_source(found: dict) -> str:
    """Where the peak rates come from, said plainly (bench.common.tuned.provenance)."""
    if found["kind"] == "given":
        return " (given by --lr: no sweep chose them)"
    text = f" (chosen on validation data by the tuning that chose the defaults, `{found['from']['command']}`"
    if found["differs"]:
        text += f"; this comparison differs in {', '.join(found['differs'])}"
    unpicked = found.get("swept_not_picked", [])  # older results.json files call every spec not picked never swept
    lists = [f"{how}: {', '.join(specs)}" for how, specs in (("swept but not picked", unpicked),
                                                             ("never swept", found["never_swept"])) if specs]
    if lists:
        text += "; " + "; ".join(lists) + (", which take their name's or the common rate" if len(lists) == 1 else
                                           "; these take their name's or the common rate")
    return text + ("; run python -m bench.tune for rates of its own)" if found["differs"] or found["never_swept"]
                   or unpicked else ")")


def model_text(facts: dict) -> str:
    shape, runs = facts["shape"], facts["runs"]
    parameters = ("no finished run" if not runs else f"{runs['backbone_parameters']:,} backbone parameters; "
                  f"{runs['tokens'] / runs['backbone_parameters']:.2f} training tokens per parameter")
    return (f"{facts['model']}: n_layer {shape['n_layer']}, d_model {shape['d_model']}, n_head {shape['n_head']}, "
            f"d_ff {shape['d_ff']}, {shape['positions']} positions; {parameters}")


def flops_text(convention: str) -> str:
    return f"{convention}: " + ("attention over the full T × T, whatever the mask (what torch's FlopCounterMode "
                                "measures)" if convention == "dense" else
                                "causal and prefix attention only for the blocks a tiled kernel computes "
                                "(backbone.flops)")


def data_rows(facts: dict) -> dict:
    corpus, runs = facts["corpus"], facts["runs"]
    return {
        "data": f"{corpus['name']}: {corpus['description']}",
        "data size": f"{corpus['train_tokens']:,} training tokens in {corpus['train_windows']:,} windows, "
                     f"{corpus['heldout_windows']:,} held-out windows (first {corpus['evaluated']} evaluated)",
        "epochs": (f"{runs['tokens'] / corpus['train_tokens']:.1f} passes over the training windows per run (mean)"
                   if runs else "no finished run"),
        "tokenizer": corpus["tokenizer"],
        "vocabulary": f"{corpus['vocab_size']} ids ({corpus['ordinary']} ordinary, {corpus['special']} special, "
                      f"{corpus['sentinels']} sentinels)"}


def yardstick_rows(facts: dict, bayes: dict | None) -> dict:
    found = {}
    if bayes:
        found["learnable range"] = "; ".join(
            f"{spec} {metric}: unigram {bayes['unigram'][spec][metric]:.3f} → Bayes floor {floor:.3f} nats"
            for spec, floors in bayes["floors"].items() for metric, floor in floors.items())
    if facts.get("downstream"):
        found["downstream"] = facts["downstream"]
    probe = facts.get("probe")
    if probe:
        found["probes"] = (f"diagnostic linear probes fitted on {probe['train_windows']} held-out windows, scored on "
                           f"the next {probe['test_windows']}, asked about {probe['chosen_rate']:.0%} of each "
                           f"window's positions; fine-tuning probe: {probe['finetune_steps']} steps of "
                           f"{probe['finetune_batch']} windows")
    if facts.get("controls"):
        found["untrained controls"] = (", ".join(f"{name} (read as {spec})" for name, spec in
                                                 facts["controls"].items())
                                       + ": each seed's backbone at the initialisation its runs start from, through "
                                       "the same yardsticks, never trained")
    return found


def setup_table(facts: dict, bayes: dict | None = None) -> dict:
    """{row: text} of the report's setup section, worded from a comparison's setup facts (results.json's "setup",
    bench.orchestration.pipeline.setup_facts) and its Bayes references."""
    note = f" ({facts['versions_note']})" if facts.get("versions_note") else ""
    table = {
        "command": "python -m bench.compare " + shlex.join(facts["command"]),
        "objectives": ", ".join(facts["objectives"]), "seeds": facts["seeds"], "budget (FLOPs)": f"{facts['budget']:.3g}",
        "model": model_text(facts), "sequence length": facts["sequence_length"], "global batch": facts["batch_size"],
        "FLOPs charged": flops_text(facts["flops"]),
        "peak learning rates": ", ".join(f"{spec} {rate:g}" for spec, rate in facts["rates"].items())
        + rates_source(facts["rate_source"]),
        **data_rows(facts),
        "device": f"{facts['device']} × {facts['world_size']}, precision {facts['precision']}",
        "environment": describe_versions(facts["versions"]) + note,
        "live metrics": (f"every {facts['log_every']} steps in runs/NAME/logs/from-step-S/metrics.csv (CSV; "
                         "TensorBoard beside it where installed)" if facts["log_every"] else "off (--log-every 0)"),
        "git revision": facts["revision"],
        **({"stale runs": f"kept by --resume --allow-stale, trained by other code: {', '.join(facts['stale'])}"}
           if facts.get("stale") else {}),
        "written": facts["written"],
    }
    return {**table, **yardstick_rows(facts, bayes)}


def sweep_setup_table(facts: dict) -> dict:
    """{row: text} of a budget sweep's setup section: its largest budget's, every budget, and the time it took (none
    for a frontier built without its facts, as from its budgets' results alone)."""
    if not facts:
        return {}
    largest = setup_table(facts["largest"], facts["bayes"])
    rows = {key: value for key, value in largest.items() if key not in ("command", "budget (FLOPs)", "written")}
    return {"command": largest["command"], "budgets (FLOPs)": ", ".join(f"{b:.3g}" for b in facts["budgets"]),
            **rows, "sweep time": f"{facts['run_seconds'] / 60:.1f} min in its runs (training, evaluations, probes and "
                                  f"tasks, summed over runs and sessions); {facts['seconds']:.0f} s of wall time in "
                                  "this session"}
