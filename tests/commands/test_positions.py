import json
import subprocess
import sys

import pytest

from bench.positions import main


def test_position_table_at_512(capsys):
    main(["--seq-len", "512", "--json", "--samples", "64"])
    rows = {row["objective"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["ar"]["supervised_positions"] == rows["ar"]["measured_positions"] == 511
    mlm = rows["mlm"]
    assert mlm["supervised_positions"] == mlm["measured_positions"] == 77
    # 77 chosen, each [MASK] with p = 0.8: 61.6 expected; rate·T·0.8 = 61.44 is the Bernoulli rule's figure
    assert (mlm["mask"], mlm["random"], mlm["keep"]) == pytest.approx((61.6, 7.7, 7.7))
    bernoulli = rows["mlm:rule=bernoulli"]
    assert (bernoulli["mask"], bernoulli["random"], bernoulli["keep"]) == pytest.approx((61.44, 7.68, 7.68))
    assert rows["electra"]["discriminator_positions"] == 512 and rows["electra"]["generator_positions"] == 77
    assert rows["electra"]["supervised_positions"] == 589
    span = rows["span"]
    assert (span["noise_tokens"], span["spans"], span["raw_tokens"], span["supervised_positions"]) == (70, 23, 464, 94)
    assert rows["ar"]["incremental_generation"] and not mlm["incremental_generation"]
    assert mlm["ratio_to_ar"] == pytest.approx(77 / 511)
    for row in rows.values():
        assert row["flops_per_supervised_position"] == pytest.approx(row["flops_per_sequence"]
                                                                     / row["supervised_positions"])
    # cheaper per sequence than AR: MLM projects 77 rows onto the vocabulary instead of 511
    assert mlm["flops_per_sequence"] < rows["ar"]["flops_per_sequence"] < rows["electra"]["flops_per_sequence"] * 2


def test_position_table_prints_markdown(capsys):
    main(["--seq-len", "128", "--model", "tiny", "--samples", "8"])
    lines = capsys.readouterr().out.splitlines()
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines
             if line.startswith("| ") and "objective" not in line}
    assert cells["ar"][1:3] == ["127", "127.00"] and cells["ar"][5] == "yes"
    assert cells["mlm"][1:3] == ["19", "19.00"] and cells["mlm"][3] == "15.20 / 1.90 / 1.90"
    assert cells["electra"][1] == "147" and cells["span"][0] == "prefix"


@pytest.mark.parametrize("args, message", [
    (["--objectives", "mlm:rate=2"], "mlm rate must be in (0, 1], got 2.0"),
    (["--objectives", "gpt"], "unknown objective 'gpt'"),
    (["--objectives", "span", "--seq-len", "5"], "too short"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--seq-len", "1", "--objectives", "mlm"], "--seq-len must be >= 2"),
    (["--seq-len", "128:0.9,512:0.1"], "is a schedule; this command takes one length"),
])
@pytest.mark.slow
def test_cli_errors_are_one_line_with_status_2(args, message):
    result = subprocess.run([sys.executable, "-m", "bench.positions", *args], capture_output=True, text=True)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
