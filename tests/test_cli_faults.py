"""The bad-input corpus: for every command, each kind of bad value of each flag, each KVSPEC_*
variable and each input file kvspec reads gives exit 2, one line naming the culprit, and no
traceback, before any vLLM is imported (issue 16). Result files: checked writable first,
written atomically, never left stale."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from vllm_copies import run_kvspec

pytestmark = pytest.mark.release_independent

FIND = {"target": "core lookups", "invariant": "x", "situation": "y", "message": "m", "example": {}}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One folder of bad inputs: a corrupt and a foreign finds folder, a file where a folder
    belongs, a directory where a file belongs, a read-only directory."""
    root = tmp_path_factory.mktemp("bad-inputs")
    (root / "corrupt-finds").mkdir()
    (root / "corrupt-finds" / "a.json").write_text("{not json")
    (root / "foreign-finds").mkdir()
    (root / "foreign-finds" / "a.json").write_text(json.dumps({"hello": "world"}))
    (root / "alien-target-finds").mkdir()
    (root / "alien-target-finds" / "a.json").write_text(json.dumps({**FIND, "target": "nothing"}))
    (root / "a-file").write_text("not a folder")
    (root / "a-dir").mkdir()
    (root / "bad.toml").write_text("[[divergence]\n")
    (root / "triage.toml").write_text('x = "not a table"\n')
    (root / "mutate.json").write_text("{}")
    (root / "read-only").mkdir()
    os.chmod(root / "read-only", 0o555)
    yield root
    subprocess.run(["umount", str(root / "read-only")], capture_output=True)  # if read_only mounted one


def read_only(inputs: Path) -> Path:
    """A directory this process cannot write in (root ignores modes: a read-only mount then)."""
    directory = inputs / "read-only"
    if os.access(directory, os.W_OK):
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(directory)],
                                 capture_output=True)
        if mounted.returncode != 0:
            pytest.skip("no read-only directory: running as root without mount")
    return directory


# (id, arguments with {in} for the inputs folder and {ro} for a read-only directory, extra
# environment, what the one line must name)
CORPUS = [
    # kvspec check: flags
    ("check-unknown-flag", ["check", "--nope"], {}, "unrecognized arguments: --nope"),
    ("check-seed-text", ["check", "--seed", "x"], {}, "argument --seed: invalid int value: 'x'"),
    ("check-deadline-nan", ["check", "--deadline", "nan"], {}, "--deadline nan: give a positive number"),
    ("check-deadline-inf", ["check", "--deadline", "inf"], {}, "--deadline inf: give a positive number"),
    ("check-deadline-negative", ["check", "--deadline", "-1"], {}, "--deadline -1: give a positive number"),
    ("check-unknown-check", ["check", "--check", "nope"], {}, "argument --check: invalid choice: 'nope'"),
    ("check-jobs-zero", ["check", "--jobs", "0"], {}, "--jobs 0: give at least 1"),
    ("check-jobs-text", ["check", "--jobs", "two"], {}, "argument --jobs: invalid int value: 'two'"),
    ("check-unknown-inject", ["check", "--inject", "nope"], {}, "unknown variant 'nope'"),
    ("check-json-is-dir", ["check", "--json", "{in}/a-dir"], {}, "/a-dir: is a directory"),
    ("check-json-under-file", ["check", "--json", "{in}/a-file/c.json"], {}, "a-file does not exist"),
    ("check-json-read-only", ["check", "--json", "{ro}/c.json"], {}, "cannot write in"),
    ("check-junit-is-dir", ["check", "--junit", "{in}/a-dir"], {}, "/a-dir: is a directory"),
    ("check-junit-under-file", ["check", "--junit", "{in}/a-file/j.xml"], {}, "a-file does not exist"),
    ("check-junit-read-only", ["check", "--junit", "{ro}/j.xml"], {}, "cannot write in"),
    ("check-junit-no-value", ["check", "--junit"], {}, "argument --junit: expected one argument"),
    ("check-divergences-dir", ["check", "--divergences", "{in}/a-dir"], {}, "a-dir: Is a directory"),
    ("check-divergences-missing", ["check", "--divergences", "{in}/none.toml"], {}, "none.toml: no such file"),
    ("check-divergences-corrupt", ["check", "--divergences", "{in}/bad.toml"], {}, "bad.toml: not valid TOML"),
    ("check-vllm-unknown", ["check", "--vllm", "0.35.0"], {}, "unsupported vLLM version '0.35.0'"),
    ("check-vllm-src-missing", ["check", "--vllm-src", "{in}/none"], {}, "/none: no such directory"),
    ("check-vllm-src-not-vllm", ["check", "--vllm-src", "{in}/a-dir"], {}, "is not a vLLM checkout"),
    # kvspec check: the input files it reads, and the environment
    ("check-finds-corrupt", ["check"], {"KVSPEC_FINDS": "{in}/corrupt-finds"}, "corrupt-finds/a.json: not a readable JSON find"),
    ("check-finds-foreign", ["check"], {"KVSPEC_FINDS": "{in}/foreign-finds"}, "foreign-finds/a.json: not a find: no 'target'"),
    ("check-finds-alien-target", ["check"], {"KVSPEC_FINDS": "{in}/alien-target-finds"}, "unknown target 'nothing'"),
    ("env-finds-a-file", ["check"], {"KVSPEC_FINDS": "{in}/a-file"}, "KVSPEC_FINDS="),
    ("env-vllm", ["check"], {"KVSPEC_VLLM": "0.29.0"}, "KVSPEC_VLLM=0.29.0: unsupported vLLM version"),
    ("env-vllm-src", ["check"], {"KVSPEC_VLLM_SRC": "{in}/none"}, "KVSPEC_VLLM_SRC="),
    ("env-vllm-and-src", ["check"], {"KVSPEC_VLLM": "0.34.0", "KVSPEC_VLLM_SRC": "{in}/a-dir"}, "both set"),
    ("env-vllm-home", ["check"], {"KVSPEC_VLLM_HOME": "{in}/none"}, "KVSPEC_VLLM_HOME="),
    ("env-divergences", ["check"], {"KVSPEC_DIVERGENCES": "{in}/none.toml"}, "KVSPEC_DIVERGENCES="),
    ("env-strict-drafter", ["check"], {"KVSPEC_STRICT_DRAFTER": "maybe"}, "KVSPEC_STRICT_DRAFTER='maybe'"),
    ("env-any-command", ["versions"], {"KVSPEC_VLLM": "0.29.0"}, "KVSPEC_VLLM=0.29.0"),
    # kvspec fuzz
    ("fuzz-minutes-missing", ["fuzz"], {}, "the following arguments are required: --minutes"),
    ("fuzz-minutes-nan", ["fuzz", "--minutes", "nan"], {}, "--minutes nan: give a positive number"),
    ("fuzz-minutes-zero", ["fuzz", "--minutes", "0"], {}, "--minutes 0: give a positive number"),
    ("fuzz-round-seconds", ["fuzz", "--minutes", "1", "--round-seconds", "nan"], {}, "--round-seconds nan"),
    ("fuzz-db-a-file", ["fuzz", "--minutes", "1", "--db", "{in}/a-file"], {}, "--db {in}/a-file: not a directory"),
    ("fuzz-db-under-file", ["fuzz", "--minutes", "1", "--db", "{in}/a-file/db"], {}, "a-file is a file, not a directory"),
    ("fuzz-db-read-only", ["fuzz", "--minutes", "1", "--db", "{ro}/db"], {}, "is not writable"),
    ("fuzz-finds-corrupt", ["fuzz", "--minutes", "1", "--finds", "{in}/corrupt-finds"], {}, "corrupt-finds/a.json"),
    ("fuzz-finds-a-file", ["fuzz", "--minutes", "1", "--finds", "{in}/a-file"], {}, "--finds {in}/a-file: not a directory"),
    ("fuzz-target", ["fuzz", "--minutes", "1", "--targets", "nope"], {}, "unknown target 'nope'"),
    ("fuzz-inject", ["fuzz", "--minutes", "1", "--inject", "nope"], {}, "unknown variant 'nope'"),
    ("fuzz-max-finds-zero", ["fuzz", "--minutes", "1", "--max-finds", "0"], {}, "--max-finds 0: give at least 1"),
    # kvspec prove
    ("prove-bound-negative", ["prove", "--bound", "-1"], {}, "--bound -1: give at least 1"),
    ("prove-bound-zero", ["prove", "--bound", "0"], {}, "--bound 0: give at least 1"),
    ("prove-bound-huge", ["prove", "--bound", "100000"], {}, "--bound 100000: at most"),
    ("prove-bound-text", ["prove", "--bound", "x"], {}, "argument --bound: invalid int value: 'x'"),
    ("prove-json-read-only", ["prove", "--json", "{ro}/p.json"], {}, "cannot write in"),
    # kvspec zoo
    ("zoo-seeds-zero", ["zoo", "--seeds", "0"], {}, "--seeds 0: at least one seed"),
    ("zoo-entry", ["zoo", "--entry", "nope"], {}, "unknown zoo entry 'nope'"),
    ("zoo-json-read-only", ["zoo", "--json", "{ro}/z.json"], {}, "cannot write in"),
    # kvspec review
    ("review-head-missing", ["review", "--base", "0.34.0", "--head", "{in}/none"], {}, "--head {in}/none: no such directory"),
    ("review-base-unknown", ["review", "--base", "0.29.0", "--head", "0.34.0"], {}, "--base 0.29.0: unsupported"),
    ("review-scale-nan", ["review", "--base", "0.34.0", "--head", "0.33.0", "--scale", "nan"], {}, "--scale nan"),
    ("review-out-read-only", ["review", "--base", "0.34.0", "--head", "0.33.0", "--out", "{ro}/r.md"], {}, "cannot write in"),
    ("review-json-is-dir", ["review", "--base", "0.34.0", "--head", "0.33.0", "--json", "{in}/a-dir"], {}, "is a directory"),
    # kvspec mutate
    ("mutate-limit", ["mutate", "--limit", "0"], {}, "--limit must be at least 1"),
    ("mutate-min-score", ["mutate", "--min-score", "5"], {}, "--min-score 5"),
    ("mutate-triage-missing", ["mutate", "--triage", "{in}/none.toml"], {}, "--triage {in}/none.toml"),
    ("mutate-triage-foreign", ["mutate", "--triage", "{in}/triage.toml"], {}, "is not a table"),
    ("mutate-from-json-missing", ["mutate", "--from-json", "{in}/none.json"], {}, "--from-json {in}/none.json: no such file"),
    ("mutate-from-json-foreign", ["mutate", "--from-json", "{in}/mutate.json"], {}, "not a kvspec mutate report"),
    ("mutate-json-read-only", ["mutate", "--json", "{ro}/m.json"], {}, "cannot write in"),
    # kvspec matrix
    ("matrix-jobs-text", ["matrix", "--jobs", "x"], {}, "argument --jobs: invalid int value: 'x'"),
    ("matrix-jobs-zero", ["matrix", "--jobs", "0", "--out", "{in}/a-dir"], {}, "--jobs 0: give at least 1"),
    ("matrix-release", ["matrix", "0.29.0"], {}, "unsupported vLLM version '0.29.0'"),
    ("matrix-out-a-file", ["matrix", "--out", "{in}/a-file"], {}, "no such directory"),
    # the command itself
    ("no-command", [], {}, "the following arguments are required: command"),
    ("unknown-command", ["chek"], {}, "invalid choice: 'chek'"),
]


@pytest.mark.parametrize("args, env, message", [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_bad_input_is_one_line_exit_2_no_traceback(args, env, message, inputs):
    ro = str(read_only(inputs)) if any("{ro}" in a for a in args) else ""
    fill = lambda text: text.replace("{in}", str(inputs)).replace("{ro}", ro)  # noqa: E731
    proc = run_kvspec(*map(fill, args), env_extra={k: fill(v) for k, v in env.items()}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("kvspec: error: "), proc.stderr
    assert fill(message) in proc.stderr


def test_debug_shows_the_traceback_of_an_error():
    proc = run_kvspec("check", "--deadline", "0", "--debug")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and proc.stderr.rstrip().endswith("--deadline 0: give a positive number")


def test_the_bad_input_corpus_covers_every_command():
    commands = {c[1][0] for c in CORPUS if c[1]}
    assert {"check", "fuzz", "prove", "zoo", "review", "mutate", "matrix"} <= commands
    variables = {name for c in CORPUS for name in c[2]}
    assert {"KVSPEC_FINDS", "KVSPEC_VLLM", "KVSPEC_VLLM_SRC", "KVSPEC_VLLM_HOME", "KVSPEC_DIVERGENCES",
            "KVSPEC_STRICT_DRAFTER"} <= variables


# ----------------------------------------------------------------------------- result files
def test_a_full_disk_under_the_real_cli_is_one_line_exit_2(tmp_path):
    """A real full file system (a small tmpfs filled up), where mounting is allowed."""
    disk = tmp_path / "full"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small file system here")
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={disk}/filler", "bs=1k", "count=64"], capture_output=True)
        out = disk / "check.json"
        proc = run_kvspec("check", "--quick", "--check", "seed: hybrid coordinator", "--json", str(out), "--quiet")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].endswith("cannot write: No space left on device")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no truncated check.json
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
