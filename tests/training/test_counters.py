import pytest
import torch

from backbone import ConfigError
from bench.training.records import COUNTERS_SCHEMA, Counters, PhaseCounters


def two_phases() -> Counters:
    counters = Counters([PhaseCounters(16, 0.5), PhaseCounters(32, 0.5, "mlm")])
    for phase, tokens in ((0, 64), (0, 64), (1, 128)):
        counters.add_step(phase, tokens, supervised_positions=tokens // 8, flops=1000 * tokens, loss=2.5)
    return counters


def test_a_step_counts_in_the_run_s_totals_and_its_phase_s_which_add_up_to_them():
    counters = two_phases()
    assert (counters.step, counters.tokens, counters.supervised_positions, counters.flops) == (3, 256, 32, 256_000)
    assert [(p.steps, p.tokens, p.supervised_positions, p.flops) for p in counters.phases] == \
        [(2, 128, 16, 128_000), (1, 128, 16, 128_000)]
    assert counters.last_finite_loss == 2.5
    assert counters.per_sequence_basis() == (16, 1)  # the final phase's
    unstarted = Counters([PhaseCounters(16, 0.5), PhaseCounters(32, 0.5)])
    unstarted.add_step(0, 64, 8, 64_000, 3.0)
    assert unstarted.per_sequence_basis() == (8, 1)  # the whole run's, when the final phase ran no step


def test_a_revision_and_a_thread_count_are_recorded_once_per_change_in_order():
    counters = Counters([PhaseCounters(16, 1.0)])
    warnings = [counters.mark_session(revision, threads)
                for revision, threads in (("abc1234", 2), ("abc1234", 2), ("def5678", 1))]
    assert counters.revisions == ["abc1234", "def5678"] and counters.threads == [2, 1]
    assert warnings[:2] == [None, None] and "trained on 2 threads until now and continues on 1" in warnings[2]
    assert "--threads-per-run 2" in warnings[2]


def test_the_checkpointed_state_reads_back_equal_through_weights_only_load(tmp_path):
    counters = two_phases()
    torch.save({"counters": counters.to_state()}, tmp_path / "state.pt")
    saved = torch.load(tmp_path / "state.pt", weights_only=True)["counters"]
    assert saved["schema"] == COUNTERS_SCHEMA
    assert Counters.from_state(saved, "state.pt") == counters


def test_a_phase_is_written_as_run_records_hold_it():
    assert PhaseCounters(16, 1.0, None, 2, 3, 4, 5).to_json() == \
        {"seq_len": 16, "share": 1.0, "steps": 2, "tokens": 3, "supervised_positions": 4, "flops": 5}
    assert list(PhaseCounters(16, 1.0, "ar").to_json())[2] == "objective"


@pytest.mark.parametrize("change", ["schema", "field", "missing", "phase"])
def test_counters_of_another_layout_are_refused_with_one_line(change):
    state = two_phases().to_state()
    if change == "schema":
        state["schema"] = COUNTERS_SCHEMA + 1
    elif change == "field":
        state["epoch"] = 1
    elif change == "missing":
        del state["next_eval"]
    else:
        del state["phases"][0]["share"]
    with pytest.raises(ConfigError, match="old.pt holds training counters of another layout"):
        Counters.from_state(state, "old.pt")
