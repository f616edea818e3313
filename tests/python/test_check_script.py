"""scripts/check.sh (`make check`): every stage runs even after a failure, and the last
line names each stage and whether it passed. MAKE is replaced by `true` or `false` so the
stages themselves do not run."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check.sh")


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
