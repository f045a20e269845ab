"""What a check sets aside on a release with a recorded finding (kvspec/gate/release_findings.py):
only a departure that is that finding and nothing else, only on the releases it is recorded for,
only on its own check."""

from kvspec.gate.release_findings import SIGNATURES, ReleaseFinding, recorded_departure

PROMOTION = "sliding-window-mla-promotion-keeps-bounded-replay"
FINDING = ReleaseFinding(PROMOTION, ("0.31.0", "0.33.0"), "grouping", "FAILS", "docs/findings/x.md", "0.34.0")
CRASH = f"vLLM raised TypeError: MLAAttentionSpec.__init__() got an {SIGNATURES[PROMOTION]}"


def test_a_departure_that_is_the_recorded_finding_alone_is_set_aside():
    assert recorded_departure("0.33.0", "grouping", [CRASH], [FINDING]) is FINDING
    assert recorded_departure("0.33.0", "grouping", [CRASH, CRASH], [FINDING]) is FINDING


def test_anything_else_in_the_departure_keeps_it_a_failure():
    assert recorded_departure("0.33.0", "grouping", [CRASH, "2 groups, expected 1"], [FINDING]) is None
    assert recorded_departure("0.33.0", "grouping", ["2 groups, expected 1"], [FINDING]) is None
    assert recorded_departure("0.33.0", "grouping", [], [FINDING]) is None


def test_only_on_its_releases_and_its_check():
    assert recorded_departure("0.34.0", "grouping", [CRASH], [FINDING]) is None
    assert recorded_departure("0.33.0", "store sides", [CRASH], [FINDING]) is None


def test_every_signature_names_a_recorded_finding():
    from kvspec.tools import matrix

    assert set(SIGNATURES) <= {f.id for f in matrix.load()}
