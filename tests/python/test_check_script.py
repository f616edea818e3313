"""scripts/check.sh (`make check`): every stage runs even after a failure, and the last
line names each stage and whether it passed. MAKE is replaced by `true` or `false` so the
stages themselves do not run. Each run keeps its stage logs in a directory of its own
(CHECK_LOGS), never in build/check, where a running `make check` keeps its own."""

import os
import stat
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check.sh")
os.environ["CHECK_LOGS"] = tempfile.mkdtemp(prefix="tide-check-logs.")


def run(make, stages):
    env = dict(os.environ, MAKE=make, CHECK_STAGES=stages)
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout.strip().splitlines()[-1]


def test_all_stages_pass():
    rc, last = run(
        "true", "format test typecheck test-docs test-vllm test-vllm33 asan valgrind tsan fuzz"
    )
    assert rc == 0
    assert last.startswith("check: PASS:")
    for stage in ("format ok", "test ok", "typecheck ok", "test-docs ok", "test-vllm ok", "test-vllm33 ok",
                  "asan ok", "valgrind ok", "tsan ok", "fuzz ok"):
        assert stage in last


def test_default_stages_include_both_vllm_versions():
    """Without CHECK_STAGES, `make check` runs the 0.32 engine tests and the 0.33 tests."""
    env = {k: v for k, v in os.environ.items() if k != "CHECK_STAGES"}
    env["MAKE"] = "true"
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    last = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 0
    assert " test-vllm ok" in last and " test-vllm33 ok" in last
    assert " test-docs ok" in last


def test_default_stages_include_the_type_check():
    """Without CHECK_STAGES, `make check` runs mypy --strict over python/tide (make typecheck)."""
    env = {k: v for k, v in os.environ.items() if k != "CHECK_STAGES"}
    env["MAKE"] = "true"
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert " typecheck ok" in p.stdout.strip().splitlines()[-1]


def test_default_stages_include_the_format_check():
    """Without CHECK_STAGES, `make check` first checks every C file against .clang-format."""
    env = {k: v for k, v in os.environ.items() if k != "CHECK_STAGES"}
    env["MAKE"] = "true"
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert "check: PASS: format ok" in p.stdout.strip().splitlines()[-1]


def test_failed_stage_is_named_and_the_rest_still_run():
    rc, last = run("false", "test tsan")
    assert rc == 1
    assert last.startswith("check: FAIL: test tsan")
    assert "test FAILED (exit 1)" in last and "tsan FAILED (exit 1)" in last


def test_unknown_stage_is_refused_by_name():
    rc, last = run("true", "test nosuch")
    assert rc == 1
    assert "FAIL: nosuch" in last and "test ok" in last


def test_failed_tests_are_named_above_the_summary(tmp_path):
    """A failed stage's log lines that name what failed (a C test's FAIL line with the two
    before it, pytest's FAILED line) are printed again above the summary line; a passing
    stage's are not, and the logs go where CHECK_LOGS says."""
    fake = tmp_path / "fake-make"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'PASS fine_test 1.0 ms'\n"
        "echo '    context one'\n"
        "echo '    context two'\n"
        "echo 'FAIL broken_test 2.0 ms'\n"
        "echo 'FAILED tests/python/test_x.py::test_y - AssertionError'\n"
        "exit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    logs = tmp_path / "logs"
    env = dict(os.environ, MAKE=str(fake), CHECK_STAGES="test", CHECK_LOGS=str(logs))
    p = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 1
    assert lines[-1].startswith("check: FAIL: test")
    head = lines.index("=== check: what failed in stage test (all of it in "
                       f"{logs}/test.log) ===")
    digest = lines[head + 1:-1]
    assert digest == ["    context one", "    context two", "FAIL broken_test 2.0 ms",
                      "FAILED tests/python/test_x.py::test_y - AssertionError"]
    assert (logs / "test.log").read_text().count("broken_test") == 1
