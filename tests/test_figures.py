"""benchmarks/figures.py's collecting (no measuring here: speed figures are not asserted)."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "figures.py"
spec = importlib.util.spec_from_file_location("figures", SCRIPT)
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def test_a_missing_results_file_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "figures.json").write_text(json.dumps({"measured": {"versions": ["0.34.0"]}}))
    assert figures.main(["--reuse", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zoo_detection.json is missing" in err
    assert not (tmp_path / "figures.md").exists()


def test_a_half_written_results_file_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "figures.json").write_text('{"measured": ')
    assert figures.main(["--reuse", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "figures.json is not JSON" in err


def test_inconclusive_seeds_are_grouped_by_why_unpatched_vllm_failed():
    def entry(name, seeds, why):
        return {"entry": name, "missed_seeds": [], "inconclusive_seeds": seeds, "control_failures": why}

    zoo = {"entries": {"0.34.0": [entry("a", [4], ["NEW divergence X"]), entry("b", [4], ["NEW divergence X"]),
                                  entry("c", [], [])]}}  # fmt: skip
    lines = figures.not_detected(zoo)
    assert len(lines) == 1 and "NEW divergence X" in lines[0] and "`a`" in lines[0] and "`b`" in lines[0]
    zoo["entries"]["0.34.0"] = [entry("c", [], [])]
    assert figures.not_detected(zoo)[0].startswith("Every entry detected")
