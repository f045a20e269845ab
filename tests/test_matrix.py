"""`kvspec matrix` (kvspec/tools/matrix.py): an older release's gate is judged against the findings
recorded for it, as a strict expected failure: the recorded rows pass, any other finding or a
record that holds again fails, "cannot drive" is never a finding, and a bad file is one line."""

import pytest
from test_cli import run_kvspec

from kvspec.impl.target import TargetError
from kvspec.tools import matrix
from kvspec.tools.matrix import ReleaseFinding, judge

FINDING = ReleaseFinding("f", ("0.31.0",), "prefix-cache lookups", "vLLM crashed", "docs/findings/f.md", "0.32.0")


def report(**verdicts):
    """A `kvspec check --json` report: every row holds but those given."""
    names = {"grouping": "grouping", "lookups": "prefix-cache lookups", "proofs": "proofs"}
    rows = {name: verdicts.get(key, "holds") for key, name in names.items()}
    return {"checks": [{"check": check, "verdict": verdict} for check, verdict in rows.items()]}


def test_a_recorded_finding_is_expected_on_its_release_only():
    code, lines = judge("0.31.0", report(lookups="vLLM crashed"), [FINDING])
    assert code == 0 and "as recorded: f, fixed in 0.32.0" in lines[0]
    assert judge("0.32.0", report(lookups="vLLM crashed"), [FINDING])[0] == 1


def test_another_verdict_or_another_check_is_a_new_finding():
    assert judge("0.31.0", report(lookups="FAILS"), [FINDING])[0] == 1
    assert judge("0.31.0", report(lookups="vLLM crashed", grouping="FAILS"), [FINDING])[0] == 1


def test_a_record_whose_row_holds_again_fails_so_that_it_is_removed():
    code, lines = judge("0.31.0", report(), [FINDING])
    assert code == 1 and "remove the record" in lines[0]


def test_cannot_drive_is_kvspec_s_and_never_expected():
    # Not even recordable: load() refuses a record with that verdict (below).
    assert judge("0.31.0", report(proofs="cannot drive"), [])[0] == 3


def test_the_recorded_findings_load_and_name_their_reports():
    findings = matrix.load()
    assert findings and all(f.report.startswith("docs/findings/") for f in findings)


@pytest.mark.parametrize("text, message", [
    ("[[finding]]\nid = 1\n", "needs exactly the fields"),
    ('[[finding]]\nid = "x"\nreleases = "0.31.0"\ncheck = "proofs"\nverdict = "FAILS"\n'
     'report = "README.md"\nfixed_in = "0.32.0"\n', "releases a list"),
    ('[[finding]]\nid = "x"\nreleases = ["0.31.0"]\ncheck = "proofs"\nverdict = "cannot drive"\n'
     'report = "README.md"\nfixed_in = "0.32.0"\n', "with a finding's verdict"),
    ('[[finding]]\nid = "x"\nreleases = ["0.31.0"]\ncheck = "proofs"\nverdict = "FAILS"\n'
     'report = "docs/findings/none.md"\nfixed_in = "0.32.0"\n', "no report"),
    ("not toml [", "release findings"),
])
def test_a_malformed_findings_file_is_refused(tmp_path, text, message):
    path = tmp_path / "release-findings.toml"
    path.write_text(text)
    with pytest.raises(TargetError, match=message):
        matrix.load(path)


def test_bad_input_is_one_line_and_exit_2():
    proc = run_kvspec("matrix", "0.35.0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unsupported vLLM version '0.35.0'" in proc.stderr
