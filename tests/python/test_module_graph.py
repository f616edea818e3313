"""scripts/module-graph.py: src/ has no circle between its modules (issue 32.2), and the
checker itself sees a circle made by calls through headers of any shape."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "module-graph.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run(*args):
    p = subprocess.run([PYTHON, SCRIPT, *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def write(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def test_src_has_no_circle():
    rc, out = run()
    assert rc == 0, out
    assert "no cycle outside the known list" in out


def test_the_modules_that_had_circles_point_one_way():
    rc, out = run("--edges")
    assert rc == 0, out
    lines = [line for line in out.splitlines() if " -> " in line]
    arrows = {tuple(line.split("  (")[0].split(" -> ")) for line in lines}
    # The store calls its tier, the tier never calls the store (32.2).
    assert ("store/store", "store/tier") in arrows
    assert ("store/tier", "store/store") not in arrows
    # The connector's handle calls its parts; every part calls base.c, which calls none.
    for part in ("lookup", "sched", "worker"):
        assert ("connector/handle", "connector/" + part) in arrows
        assert ("connector/" + part, "connector/handle") not in arrows
    assert not [a for a in arrows if a[0] == "connector/base" and a[1].startswith("connector/")]


def test_a_circle_through_own_headers_and_a_variable_is_found(tmp_path):
    write(
        tmp_path,
        {
            "m/a.c": '#include "m/b.h"\nint a_one(void) {\n    return b_limit;\n}\n',
            "m/a.h": "int a_one(void);\n",
            "m/b.c": '#include "m/a.h"\nint b_limit = 3;\n'
            "int b_one(void) {\n    return a_one();\n}\n",
            "m/b.h": "extern int b_limit;\nint b_one(void);\n",
            # Takes only a type from a's header: no arrow.
            "m/d.c": '#include "m/a.h"\nint d_four(void) {\n    return 4;\n}\n',
        },
    )
    rc, out = run("--src", str(tmp_path), "--edges")
    assert rc == 1, out
    assert "CYCLE: m/a, m/b" in out
    assert "m/a -> m/b  (calls b_limit())" not in out and "m/a -> m/b  (uses b_limit)" in out
    assert "m/d ->" not in out


def test_a_circle_through_a_shared_header_is_found(tmp_path):
    # Both files include only the shared header; the circle is in what they call.
    write(
        tmp_path,
        {
            "m/shared.h": "int a_one(void);\nint b_two(void);\n",
            "m/a.c": '#include "m/shared.h"\nint a_one(void) {\n    return b_two() - 1;\n}\n',
            "m/b.c": '#include "m/shared.h"\n/* a_one() in a comment is no call */\n'
            "int b_two(void) {\n    return a_one() + 1;\n}\n",
            "m/c.c": '#include "m/shared.h"\nstatic int a_one(void) {\n    return 0;\n}\n'
            "int c_three(void) {\n    return a_one() + b_two();\n}\n",
        },
    )
    rc, out = run("--src", str(tmp_path), "--edges")
    assert rc == 1, out
    assert "CYCLE: m/a, m/b" in out
    assert "m/a -> m/b  (calls b_two())" in out
    # c.c's own static a_one() is not an arrow to a.c; its call of b_two() is one to b.c.
    assert "m/c -> m/a" not in out and "m/c -> m/b" in out


def test_a_missing_directory_is_named():
    rc, out = run("--src", "/nonexistent/src")
    assert rc == 2 and "no directory /nonexistent/src" in out
