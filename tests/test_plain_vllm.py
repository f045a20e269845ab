"""The runner of plain-vLLM tests (tests/plain_vllm.py): one pytest process, each file's outcome
read back apart, so a failing, a broken and a passing test sharing it are told apart."""

from plain_vllm import run_each

from kvspec.impl.target import resolve


def test_each_files_outcome_is_its_own(tmp_path):
    sources = {
        "passes": "def test_it():\n    assert 1 + 1 == 2\n",
        "fails": "def test_it():\n    assert 1 + 1 == 3\n",
        "breaks": "import no_such_module_anywhere\n\n\ndef test_it():\n    pass\n",
        "mixed": "def test_one():\n    pass\n\n\ndef test_two():\n    raise ValueError('two')\n",
    }
    outcomes = run_each(sources, resolve().root, tmp_path / "run")
    assert {name: outcome.status for name, outcome in outcomes.items()} == {
        "passes": "passed", "fails": "failed", "breaks": "error", "mixed": "failed"}
    assert "assert (1 + 1) == 3" in outcomes["fails"].text or "assert 2 == 3" in outcomes["fails"].text
    assert "ValueError: two" in outcomes["mixed"].text
