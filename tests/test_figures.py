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


def test_missed_seeds_are_listed_with_what_unpatched_vllm_failed_by():
    def entry(name, seeds, why):
        return {"entry": name, "missed_seeds": seeds, "control_failures": why}

    zoo = {"entries": {"0.34.0": [entry("a", [4], ["recorded finding X"]), entry("b", [4], []),
                                  entry("c", [], [])]}}  # fmt: skip
    lines = figures.not_detected(zoo)
    assert len(lines) == 1 and "`a` seeds [4] (unpatched vLLM: recorded finding X)" in lines[0] and "`b`" in lines[0]
    assert "`c`" not in lines[0]
    zoo["entries"]["0.34.0"] = [entry("c", [], [])]
    assert figures.not_detected(zoo)[0].startswith("Every entry detected")
