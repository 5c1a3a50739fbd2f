"""The yardsticks' own tables in report.md's results: the probes (diagnostics) and the downstream tasks, each
backbone beside the untrained controls, what the input alone gives and the Bayes ceilings."""

from __future__ import annotations

from bench.analysis.findings import Stat
from bench.analysis.results import PROBE_SCORES
from bench.analysis.summaries import DownstreamSummary, Results
from bench.report.tables import READERS, fmt, table


def probe_table(results: Results) -> str:
    probed = [(o.objective, o.probes) for o in results.objectives if o.probes]
    if not probed:
        return ""
    probed += [(f"*{u.control}*", u.probes) for u in results.untrained if u.probes]
    readers = dict.fromkeys(p.sees for _, p in probed)
    input_only = (results.bayes or {}).get("input_only") or {}
    ceilings = (results.bayes or {}).get("ceilings") or {}

    def cells(values: dict, digits: int = 3) -> list[str]:
        return [fmt(values.get(key)) if isinstance(values.get(key), Stat) else
                "" if values.get(key) is None else f"{values[key]:.{digits}f}" for key in PROBE_SCORES]

    rows = [[name, READERS.get(p.sees, p.sees), *cells({key: getattr(p, key) for key in PROBE_SCORES}),
             f"{p.probe_flops:.3g}"] for name, p in probed]
    rows += [["*input only*", READERS.get(sees, sees), *cells(input_only.get(sees, {})), ""] for sees in readers]
    rows += [["Bayes ceiling", READERS.get(sees, sees),
              *cells({"hidden_state": ceilings.get(f"hidden_state_{sees}"),
                      "replaced_word": ceilings.get(f"replaced_word_{sees}"),
                      "replaced_word_finetuned": ceilings.get(f"replaced_word_{sees}")}), ""] for sees in readers]
    return ("\n\n### Probes (diagnostics)\n\nEach question copies one objective's training input or task, so it "
            "shows how well that objective did its own homework and ranks nobody. Linear probes on each backbone's "
            "final features, read in the objective's own attention mode (raw accuracies on the test windows, mean ± "
            "95 % t-interval over seeds; the verdict divides them by the ceiling that applies). *Hidden state*: the "
            "state of a position whose word is hidden ([MASK] for a reader of the whole window, masked LM's input; "
            "a causal reader is read at the position before, next-state prediction). *Replaced word*: is the word "
            "shown its own or a replacement drawn from the language's word frequencies (ELECTRA's task)? The "
            "fine-tuned probe trains the backbone on the replaced-word question. Beside them, the untrained "
            "controls, what the input alone gives (the most frequent state; a probe on the shown word) and the "
            "Bayes ceiling. Probe FLOPs are not charged to the budget.\n\n"
            + table(rows, ["", "reads", "hidden state", "replaced word", "replaced word (fine-tuned)", "probe FLOPs"]))


def native_text(summary: DownstreamSummary) -> str:
    """The neutral tasks' average read each family's own way, per objective and control: how far the one read
    moves each backbone."""
    found = {reader: value for reader, value in summary.native_average.items() if value is not None}
    if not found:
        return ""
    return (" The neutral tasks' average on the native read (frozen; mean ± 95 % t-interval over seeds): "
            + "; ".join(f"{reader} {fmt(value)}" for reader, value in found.items()) + ".")


def downstream_table(results: Results) -> str:
    summary = results.downstream
    if not summary:
        return ""
    text = ["\n\n### Downstream tasks\n\nEvery final backbone on every labelled task, with one recipe for all: a "
            "frozen linear probe on its features, and fine-tuning of the backbone with a head that starts from that "
            "probe, at each rate of a small grid, the rate chosen on the dev split; only the chosen model is scored "
            "on the test split. Every backbone represents a sequence by the mean of its tokens' states, a causal one's "
            "included. Scores are on the test split, mean ± 95 % "
            "t-interval over seeds (the verdict's intervals add the test set's sampling); downstream FLOPs are not "
            f"charged to the budget. Recipe: {results.setup.get('downstream', '')}. A task's Bayes ceiling is the "
            "accuracy expected of the exact posterior of the language that generated its test examples, for a "
            "reader of the whole window or of the left context; *input only* is what the input alone gives; "
            "*copies* names the training signal a task's question copies (a pair objective's own task, a [MASK] "
            "in its inputs): such a task diagnoses and does not rank. *Native read* is a diagnostic that ranks "
            "nobody: the frozen probe on each family's own read, its last layer alone and a sequence at its last "
            "token (a causal backbone, GPT's read) or at [BOS] (a bidirectional one, BERT's and ELECTRA's [CLS]), "
            "where the one read mixes every layer and pools every backbone by the mean." + native_text(summary)]
    for task in summary.tasks:
        about = task_about(task.description)
        edge = [row.objective for row in task.rows if row.rate_at_edge]
        if edge:
            about += (f". The rate chosen on dev lies at the edge of the grid for {', '.join(edge)}: a wider "
                      "--finetune-lrs may score higher")
        rows = [[row.objective, fmt(row.frozen), fmt(row.finetuned), fmt(row.native),
                 ", ".join(f"{fmt(stat)} {key}" for key, stat in row.metrics.items()) if len(row.metrics) > 1
                 else "", ", ".join(f"{rate} ×{count}" for rate, count in row.rates.items()),
                 f"{row.flops.frozen:.3g} / {row.flops.finetune:.3g}"] for row in task.rows]
        text.append(f"\n**`{task.name}`** ({about})\n\n"
                    + table(rows, ["objective", "frozen probe", "fine-tuned", "native read (diagnostic)",
                                   "fine-tuned, each metric",
                                   "rate chosen on dev (× seeds)", "FLOPs frozen / fine-tune"]))
    return "\n".join(text)


def task_about(task: dict) -> str:
    """A downstream task as described (Task.describe): level, classes, metric, source, ceilings, what it copies."""
    about = (f"{task['level']} level, {task['classes']} classes, metric {task['metric']}; {task['source']}; "
             f"majority-class accuracy {task['majority_accuracy']:.3f}" if "source" in task else "")
    if task.get("ceilings"):
        about += "; Bayes ceiling " + ", ".join(f"{READERS.get(k, k)} {v:.3f}" for k, v in task["ceilings"].items())
    if task.get("input_only") is not None:
        about += f"; input only {task['input_only']:.3f}"
    if task.get("copies"):
        about += f"; copies {', '.join(task['copies'])}"
    return about

