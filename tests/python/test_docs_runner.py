"""scripts/test-docs.py (`make test-docs`) fails on each kind of false doc, naming file:line:
a shell block that fails as written (the README's old offline pip install), a server block
using the fixed ports, a figure that is not in the RESULTS.md section it cites, a quoted
message that is in no string of src/ or python/, a broken link; and it passes the same
docs once they are true. Each case runs the script on a small docs tree of its own."""

import os
import subprocess
import time
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "test-docs.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

RESULTS = """# results

## net

| GET 1MiB x1 | 3.34 | 0.91 (0.91–0.94) |

## cluster

| GET, 1 node | 2.76 |
"""


def plain_env(**extra):
    """The environment without a sanitizer runtime preloaded: under the ASan stage
    (scripts/test-extra.sh preloads libasan for the library) tools run from it can hang,
    and the runner drives build/tide, not the library under test."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    env.update(extra)
    return env


def tide_servers():
    """The pids whose command line holds "tide serve --port", read from /proc (no pgrep:
    procps is not among the packages `make deps` installs)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "tide serve --port" in cmd:
            pids.append(pid)
    return pids


def proc_cwd(pid):
    try:
        return os.readlink("/proc/%s/cwd" % pid)
    except OSError:
        return ""


def run(tmp_path, readme, docs=None):
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "bench").mkdir(exist_ok=True)
    (tmp_path / "bench" / "RESULTS.md").write_text(RESULTS)
    (tmp_path / "README.md").write_text(readme)
    for name, text in (docs or {}).items():
        (tmp_path / "docs" / name).write_text(text)
    env = plain_env(TIDE_DOCS_ROOT=str(tmp_path))
    p = subprocess.run([PYTHON, SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(autouse=True)
def need_build():
    if not os.access(os.path.join(ROOT, "build", "tide"), os.X_OK):
        pytest.fail("build/tide is missing: run make first")


def test_failing_block_is_named_with_its_command_and_output(tmp_path):
    # The README's old offline install: the venv's pip has no wheel, so bdist_wheel fails.
    rc, out = run(tmp_path, "# t\n\nInstall:\n\n    echo start\n    false\n    echo never\n")
    assert rc == 1, out
    assert "FAIL README.md:5: block failed (exit 1)" in out
    assert "--- command ---\necho start\nfalse" in out
    assert "never" not in out.split("--- output")[1]


def test_server_block_runs_on_free_ports_and_is_stopped(tmp_path):
    block = ("    build/tide serve --capacity 64MiB --metrics-port 7475 &\n"
             "    build/tide put tide://127.0.0.1:7474 k README.md\n"
             "    build/tide get tide://127.0.0.1:7474 k | head -1\n")
    rc, out = run(tmp_path, "# t\n\n" + block)
    assert rc == 0, out
    assert "README.md:3 ok" in out and "1 blocks run" in out
    # Nothing the block started is left: no tide process has the run's temp dir as cwd.
    # The runner signals what the block left; give a loaded machine 5 s to see it exit.
    deadline = time.monotonic() + 5
    while True:
        ours = [pid for pid in tide_servers() if "tide-docs-" in proc_cwd(pid)]
        if not ours or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not ours, "a server of the block was left running: " + " ".join(ours)


def test_server_that_cannot_start_fails_its_block(tmp_path):
    # The README's old vLLM command: --unix /run/tide/tide.sock with no /run/tide.
    block = "    build/tide serve --port 7474 --unix /run/tide/tide.sock --capacity 64MiB &\n"
    rc, out = run(tmp_path, "# t\n\n" + block)
    assert rc == 1, out
    assert "FAIL README.md:3: block failed" in out
    assert "exited (status" in out and "before it listened" in out
    rc, out = run(tmp_path, "# t\n\n    mkdir -p /run/tide\n" + block)
    assert rc == 0, out


def test_markers_text_skip_and_languages(tmp_path):
    readme = ("# t\n\n```text\nnot a command\n```\n\n```c\nint x;\n```\n\n"
              "<!-- docs-test: skip: needs three hosts -->\n\n    false\n\n"
              "<!-- docs-test: needs file no/such/file -->\n\n    false\n")
    rc, out = run(tmp_path, readme)
    assert rc == 0, out
    assert "0 blocks run, 2 skipped, 2 not commands" in out
    assert "skipped README.md:13 (needs three hosts)" in out
    rc, out = run(tmp_path, "# t\n\n<!-- docs-test: sikp: typo -->\n\n    true\n")
    assert rc != 0 and "unknown docs-test marker 'sikp: typo'" in out, out


def test_figure_not_in_its_results_section_fails(tmp_path):
    good = ('<!-- docs-test: figures bench/RESULTS.md "## net" -->\n'
            "1 MiB GET 3.34 GB/s, 0.91x raw TCP (0.91–0.94)\n<!-- docs-test: end -->\n")
    rc, out = run(tmp_path, "# t\n\n" + good)
    assert rc == 0, out
    # 2.76 is in RESULTS.md, but in another section than the one cited; 3.53 is in none.
    bad = good.replace("3.34", "3.53").replace("0.91x", "2.76x")
    rc, out = run(tmp_path, "# t\n\n" + bad)
    assert rc == 1, out
    assert 'README.md:4: figure 3.53 is not in bench/RESULTS.md ## net' in out
    assert 'README.md:4: figure 2.76 is not in bench/RESULTS.md ## net' in out
    rc, out = run(tmp_path, '# t\n<!-- docs-test: figures bench/RESULTS.md "## nope" -->\n'
                  "<!-- docs-test: end -->\n")
    assert rc == 1 and "no section ## nope in bench/RESULTS.md" in out, out


def test_figure_from_a_command_must_be_in_its_output(tmp_path):
    block = "<!-- docs-test: expect hits 50.62% -->\n\n    echo 'block hits 50.62% of 100'\n"
    rc, out = run(tmp_path, "# t\n\n" + block)
    assert rc == 0, out
    rc, out = run(tmp_path, "# t\n\n" + block.replace("expect hits 50.62%", "expect hits 50.60%"))
    assert rc == 1, out
    assert "README.md:5 FAILED (its output lacks 'hits 50.60%')" in out


def test_quoted_message_must_be_in_the_code(tmp_path):
    # The old MOONCAKE.md quote names a probe failure; this one is in no literal at all.
    ok = ("Refused with <!--msg-->`unknown command 'serv' (did you mean 'serve'?)` and\n"
          "<!--msg-->`cannot listen on 127.0.0.1:17720 for the metrics HTTP port`.\n")
    rc, out = run(tmp_path, "# t\n\n" + ok)
    assert rc == 0 and "2 messages" in out, out
    bad = ok.replace("unknown command", "no such command")
    rc, out = run(tmp_path, "# t\n\n" + bad)
    assert rc == 1, out
    assert "README.md:3: message `no such command 'serv' (did you mean 'serve'?)` is in no" in out
    # Placeholders alone never make a match.
    rc, out = run(tmp_path, "# t\n\n<!--msg-->`zq: zq zq [zq]`\n")
    assert rc == 1, out


def test_broken_link_and_anchor_fail(tmp_path):
    docs = {"A.md": "# A\n\n## Part two\n\n![plot](bench/plot.svg) [b](B.md)\n"}
    rc, out = run(tmp_path, "# t\n\n[a](docs/A.md#part-two) [c](docs/A.md#part-three)\n", docs)
    assert rc == 1, out
    assert "docs/A.md:5: link bench/plot.svg: no file docs/bench/plot.svg" in out
    assert "docs/A.md:5: link B.md: no file docs/B.md" in out
    assert "README.md:3: link docs/A.md#part-three: no heading #part-three" in out
    assert "#part-two" not in out
