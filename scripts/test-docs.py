#!/usr/bin/python3
"""test-docs.py — `make test-docs`: the docs run as written.

1. Every shell block in README.md and docs/*.md (a fence labelled sh/bash/shell, an
   unlabelled fence, or an indented block) runs under bash in a fresh temporary directory that
   holds links to the repository's top-level entries (a copy of python/, so that pip builds
   leave the tree alone), with build/ on PATH, fixed ports (7474, 7475, 6379, 50051) replaced
   by free ones, /run/tide, /tmp/, ../shared/ ($TIDE_SHARED) and /path/to/tide by paths of
   this run and tree, and a backgrounded `tide serve`
   waited for until its port answers. Whatever a block leaves running is killed by process
   group. A block that fails is named by file:line with its command and output tail.
2. Figures: text between `<!-- docs-test: figures bench/RESULTS.md "## SECTION" -->` and
   `<!-- docs-test: end -->` may cite only numbers that appear in that RESULTS.md section.
3. Messages: a backquoted text marked `<!--msg-->` just before it, and every backquoted text
   between `<!-- docs-test: messages -->` and `<!-- docs-test: end -->`, is one of tide's
   messages: it must match a string literal of src/ or python/ (printf/format placeholders
   match any text; "...", "…" and <name> in the quote elide).
4. Links: every relative link and image names a file that exists (and a heading, for #x).

A marker on the line(s) just above a block says what it is:
  <!-- docs-test: text -->              not a command (output, a diagram, a format)
  <!-- docs-test: needs vllm -->        runs only where .venv-vllm/ exists (likewise vllm33)
  <!-- docs-test: needs file PATH -->   runs only where PATH (from the repository root) exists
  <!-- docs-test: skip: REASON -->      never run here; REASON says why
  <!-- docs-test: expect TEXT -->       the block's output must hold TEXT (a figure the doc
                                        quotes from this command's output)
Blocks that do not run are counted as skipped in the summary with their reason.
Usage: scripts/test-docs.py [--list] [FILE[:LINE]...]
"""

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Set, Tuple, Union

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where README.md, docs/ and bench/RESULTS.md are read (its own tests point it elsewhere);
# the build, src/ and python/ are always this tree's.
DOCS = os.environ.get("TIDE_DOCS_ROOT", ROOT)
# ../shared/ in a block (the traces) is the shared folder beside the repository, or this.
SHARED = os.environ.get("TIDE_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
BLOCK_TIMEOUT = int(os.environ.get("DOCS_BLOCK_TIMEOUT", "120"))
# A block that runs vLLM's tests starts engines: minutes, not seconds.
VLLM_BLOCK_TIMEOUT = int(os.environ.get("DOCS_VLLM_BLOCK_TIMEOUT", "420"))
FIXED_PORTS = ["7474", "7475", "6379", "50051"]
MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")


class Block:
    def __init__(self, path: str, line: int, kind: str, lang: str, body: List[str],
                 marks: List[str]) -> None:
        self.path, self.line, self.kind, self.lang = path, line, kind, lang
        self.body, self.marks = body, marks

    def where(self) -> str:
        return "%s:%d" % (os.path.relpath(self.path, DOCS), self.line)


def marks_above(lines: List[str], i: int) -> List[str]:
    """The docs-test markers on the lines just above line index i (blank lines between)."""
    out = []
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    while j >= 0:
        m = MARK.match(lines[j])
        if not m:
            break
        out.append(m.group(1))
        j -= 1
    return out


def blocks(path: str) -> List[Block]:
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i, n = [], 0, len(lines)
    in_list = False
    while i < n:
        line = lines[i]
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", line)
        if m:
            fence = m.group(2)
            j = i + 1
            while j < n and not lines[j].strip().startswith(fence):
                j += 1
            ind = len(m.group(1))
            body = [b[ind:] if b[:ind].strip() == "" else b for b in lines[i + 1:j]]
            out.append(Block(path, i + 2, "fence", m.group(3).lower(), body,
                             marks_above(lines, i)))
            i = j + 1
            continue
        if re.match(r"^\s*([-*+]|\d+\.)\s", line):
            in_list = True
        elif not line.strip():
            pass
        elif not line.startswith(" "):
            in_list = False
        if (line.startswith("    ") and line.strip() and not in_list
                and (i == 0 or not lines[i - 1].strip())):
            j = i
            while j < n and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            body = [b[4:] for b in lines[i:j]]
            while body and not body[-1].strip():
                body.pop()
            out.append(Block(path, i + 1, "indent", "", body, marks_above(lines, i)))
            i = j
            continue
        i += 1
    return out


def doc_files() -> List[str]:
    return [os.path.join(DOCS, "README.md")] + sorted(glob.glob(os.path.join(DOCS, "docs", "*.md")))


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p: int = s.getsockname()[1]
    s.close()
    return p


def classify(b: Block) -> Tuple[str, Optional[str]]:
    """('run', None), ('text', why) or ('skip', why)."""
    for mk in b.marks:
        if mk == "text":
            return "text", "marked text"
        if mk.startswith("skip:"):
            return "skip", mk[5:].strip()
        if mk.startswith("needs "):
            what = mk[6:].strip()
            if what in ("vllm", "vllm33"):
                venv = os.path.join(ROOT, ".venv-" + what, "bin", "python")
                if not os.path.exists(venv):
                    return "skip", "needs .venv-%s (make test-%s builds it)" % (what, what)
            elif what == "gpu":
                if shutil.which("nvidia-smi") is None:
                    return "skip", "needs a GPU"
            elif what.startswith("file "):
                f = what[5:].strip()
                if f.startswith("../shared/"):
                    f = os.path.join(SHARED, f[len("../shared/"):])
                if not os.path.exists(os.path.join(ROOT, f)):
                    return "skip", "needs %s" % f
            else:
                raise SystemExit("%s: unknown docs-test need '%s'" % (b.where(), what))
        elif not (mk.startswith("figures") or mk.startswith("expect ") or
                  mk in ("messages", "end")):
            raise SystemExit("%s: unknown docs-test marker '%s'" % (b.where(), mk))
    if b.lang not in SHELL_LANGS:
        return "text", "language " + b.lang
    return "run", None


PRELUDE = r"""
set -e
__docs_wait_port() {  # a backgrounded server ($2) answers on its port $1 (bounded: 15 s)
    for __i in $(seq 150); do
        (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
        if ! kill -0 "$2" 2>/dev/null; then
            __st=0; wait "$2" || __st=$?
            echo "docs-test: the server started in the background exited (status $__st) before it listened on $1" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "docs-test: nothing listens on 127.0.0.1:$1 after 15 s" >&2; return 1
}
"""


def prepare(b: Block, ports: Dict[str, int], tmp: str) -> str:
    text = "\n".join(b.body)
    for old, new in ports.items():
        text = re.sub(r"(?<![\d.])%s(?!\d)" % old, str(new), text)
    text = re.sub(r"(?<![\w.])/tmp/", os.path.join(tmp, "tmp") + "/", text)
    text = text.replace("/run/tide", os.path.join(tmp, "run-tide"))
    text = text.replace("/path/to/tide", ROOT)
    text = text.replace("../shared/", SHARED.rstrip("/") + "/")
    out = []
    for line in text.split("\n"):
        # A server started without --port would take the fixed default (7474): give it the
        # port that 7474 stands for in this run.
        if re.search(r"\btided?\b.*\bserve\b", line) and "--port" not in line:
            line = re.sub(r"\bserve\b", "serve --port %d" % ports["7474"], line, count=1)
        out.append(line)
        m = re.search(r"\btided?\b.*\bserve\b.*&\s*(#.*)?$", line) or \
            re.search(r"\btided\b.*&\s*(#.*)?$", line)
        if m:
            pm = re.search(r"--port[ =](\d+)", line)
            port = pm.group(1) if pm else str(ports["7474"])
            out.append("__docs_wait_port %s $!" % port)
    return PRELUDE + "\n".join(out) + "\n"


def setup_dir(tmp: str) -> None:
    for name in os.listdir(ROOT):
        if name in (".git", "python"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(tmp, name))
    shutil.copytree(os.path.join(ROOT, "python"), os.path.join(tmp, "python"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    os.mkdir(os.path.join(tmp, "tmp"))  # /tmp/ in a block


def run_block(b: Block) -> Tuple[Union[int, str], str, str]:
    tmp = tempfile.mkdtemp(prefix="tide-docs-")
    try:
        setup_dir(tmp)
        ports = {p: free_port() for p in FIXED_PORTS}
        script = prepare(b, ports, tmp)
        env = dict(os.environ, TIDE=ROOT, HOME=tmp,
                   PATH=os.path.join(ROOT, "build") + os.pathsep + os.environ.get("PATH", ""))
        for what in ("vllm", "vllm33"):
            if "needs " + what in b.marks:
                env["PATH"] = os.path.join(ROOT, ".venv-" + what, "bin") + os.pathsep + env["PATH"]
        # Output goes to a file: a server the block left running keeps it open.
        log = open(os.path.join(tmp, ".docs-test.log"), "w+b")
        p = subprocess.Popen(["bash", "-c", script], cwd=tmp, env=env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        limit = VLLM_BLOCK_TIMEOUT if any(m.startswith("needs vllm") for m in b.marks) \
            else BLOCK_TIMEOUT
        rc: Union[int, str]
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout after %d s" % limit
        # Whatever the block left running (servers started with &) is in its process group.
        try:
            os.killpg(p.pid, signal.SIGTERM)
            for _ in range(50):
                os.killpg(p.pid, 0)
                time.sleep(0.1)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.seek(0)
        out = log.read()
        log.close()
        return rc, out.decode("utf-8", "replace"), script
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- figures ------------------------------------------------------------------------------

# A figure in a doc: a number not inside a word or a version (v0.32.0), units glued on or
# not (46.5x, 2.76x, 256KiB).
NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\d.]*\.\d)(?!\d)")


def number_set(text: str) -> Set[str]:
    """Every number of a RESULTS section, units glued on or not (46.5x, 256KiB)."""
    return set(re.findall(r"(?<![\d.])\d+(?:\.\d+)?", text))


def results_section(path: str, heading: str) -> Optional[str]:
    lines = open(path, encoding="utf-8").read().split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    out, on = [], False
    for line in lines:
        if line.strip() == heading.strip():
            on = True
            continue
        if on and re.match(r"^#{1,%d} " % level, line):
            break
        if on:
            out.append(line)
    if not on:
        return None
    return "\n".join(out)


def is_end(line: str) -> bool:
    m = MARK.match(line)
    return m is not None and m.group(1) == "end"


def figure_checks(path: str) -> Tuple[List[str], int]:
    """Failures of figure regions in one doc: numbers not in the RESULTS section named."""
    fails, count = [], 0
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if m and m.group(1).startswith("figures"):
            fm = re.match(r'figures\s+(\S+)((?:\s+"[^"]+")+)\s*$', m.group(1))
            if not fm:
                fails.append("%s:%d: figures marker needs FILE \"## SECTION\"..." % (path, i + 1))
                i += 1
                continue
            src = os.path.join(DOCS, fm.group(1))
            names = re.findall(r'"([^"]+)"', fm.group(2))
            have = set()
            for name in names:
                section = results_section(src, name) if os.path.exists(src) else None
                if section is None:
                    fails.append("%s:%d: no section %s in %s" % (path, i + 1, name, fm.group(1)))
                have |= number_set(section or "")
            cite = (fm.group(1), " ".join(names))
            j = i + 1
            while j < len(lines) and not is_end(lines[j]):
                if "docs-test:" in lines[j]:
                    fails.append("%s:%d: a docs-test marker inside a figures region (its end "
                                 "marker must stand on a line of its own)" % (
                                     os.path.relpath(path, DOCS), j + 1))
                    break
                # Figures are decimal numbers (0.91, 2.47) and integers of 2+ digits with a
                # unit after them; headings, links and code spans are not figures.
                text = re.sub(r"`[^`]*`|\]\([^)]*\)", "", lines[j])
                for num in NUM.findall(text):
                    if "." not in num and len(num.lstrip("-")) < 2:
                        continue
                    count += 1
                    if num.lstrip("-") not in have:
                        fails.append("%s:%d: figure %s is not in %s %s" % (
                            os.path.relpath(path, DOCS), j + 1, num, cite[0], cite[1]))
                j += 1
            if j == len(lines):
                fails.append("%s:%d: figures region has no <!-- docs-test: end -->" % (path, i + 1))
            i = j
        i += 1
    return fails, count


# -- messages -----------------------------------------------------------------------------

PH = "\x00"


def c_literals(text: str) -> List[str]:
    """Adjacent C string literals joined (with PRI* macros as placeholders)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    out = []
    for m in re.finditer(r'"(?:\\.|[^"\\\n])*"(?:\s*(?:PRI\w+|"(?:\\.|[^"\\\n])*"))*', text):
        parts = re.findall(r'"((?:\\.|[^"\\\n])*)"|(PRI\w+)', m.group(0))
        s = "".join(p[0] if p[0] or not p[1] else "%d" for p in parts)
        out.append(s.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
    return out


def py_literals(text: str) -> List[str]:
    return [m.group(2) for m in re.finditer(r'''[rfbRFB]?(["'])((?:\\.|(?!\1).)*)\1''', text)]


def to_tokens(lit: str, python: bool) -> str:
    if python:
        lit = re.sub(r"\{[^{}]*\}|%[-+ #0-9.*]*[sdrifx]", PH, lit)
    else:
        lit = re.sub(r"%[-+ #0-9.*]*(?:hh|h|ll|l|z|j|t)?[diouxXscpfgeEm]", PH, lit)
    return lit


def quote_matches(quote: str, lit: str) -> int:
    """How many of lit's own characters the best alignment of quote with a stretch of lit
    matches (a placeholder PH stands for 1+ characters); -1 when none aligns."""
    if PH not in lit:
        return len(quote) if quote in lit else -1
    memo: Dict[Tuple[int, int], int] = {}

    def go(qi: int, li: int) -> int:
        if qi == len(quote):
            return 0
        if li == len(lit):
            return -1
        key = (qi, li)
        if key in memo:
            return memo[key]
        best = -1
        if lit[li] == PH:
            for k in range(qi + 1, len(quote) + 1):
                r = go(k, li + 1)
                if r > best:
                    best = r
        elif lit[li] == quote[qi]:
            r = go(qi + 1, li + 1)
            if r >= 0:
                best = r + 1
        memo[key] = best
        return best

    return max([go(0, s) for s in range(len(lit)) if lit[s] == PH or lit[s] == quote[0]] + [-1])


def message_corpus() -> List[str]:
    lits = []
    for f in glob.glob(os.path.join(ROOT, "src", "**", "*.[ch]"), recursive=True):
        lits += [to_tokens(s, False) for s in c_literals(open(f, errors="replace").read())]
    for f in glob.glob(os.path.join(ROOT, "python", "**", "*.py"), recursive=True):
        lits += [to_tokens(s, True) for s in py_literals(open(f, errors="replace").read())]
    return lits


def message_ok(quote: str, corpus: List[str]) -> bool:
    """A quote is a message when each of its parts (split at an elision, "..." or "…")
    is a stretch of one string literal whose own characters make 12 of the part's characters
    or 40% of them (what placeholders stand for is the rest: placeholders alone match nothing)."""
    for part in re.split(r"\s*(?:\.\.\.|…|<[a-z_]+>)\s*", quote):
        if not part:
            continue
        need = min(len(part), max(4, min(12, 0.4 * len(part))))
        if not any(quote_matches(part, lit) >= need for lit in corpus):
            return False
    return True


def message_checks(path: str, corpus: List[str]) -> Tuple[List[str], int]:
    """Backquoted text in messages regions, which may run over lines, checked as messages."""
    fails, count = [], 0
    lines = open(path, encoding="utf-8").read().split("\n")
    on: Optional[int] = None
    region: List[str] = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if m and m.group(1) == "messages":
            on, region = i + 1, []
            continue
        if m and m.group(1) == "end" and on is not None:
            text = "\n".join(region)
            for qm in re.finditer(r"`([^`]+)`", text):
                q = re.sub(r"\s*\n\s*", " ", qm.group(1))
                count += 1
                if not message_ok(q, corpus):
                    fails.append("%s:%d: message `%s` is in no string of src/ or python/" % (
                        os.path.relpath(path, DOCS), on + 1 + text.count("\n", 0, qm.start()), q))
            on = None
            continue
        if on is not None:
            region.append(line)
    if on is not None:
        fails.append("%s:%d: messages region has no <!-- docs-test: end -->" % (
            os.path.relpath(path, DOCS), on))
    # One quote marked inline: <!--msg-->`text`.
    whole = "\n".join(lines)
    for qm in re.finditer(r"<!--\s*msg\s*-->\s*`([^`]+)`", whole):
        q = re.sub(r"\s*\n\s*", " ", qm.group(1))
        count += 1
        if not message_ok(q, corpus):
            fails.append("%s:%d: message `%s` is in no string of src/ or python/" % (
                os.path.relpath(path, DOCS), whole.count("\n", 0, qm.start(1)) + 1, q))
    return fails, count


def link_checks(path: str) -> Tuple[List[str], int]:
    """Relative links and images ([t](x), ![t](x)) that name no file, and #anchors that name
    no heading of the page linked."""
    fails, count = [], 0
    text = open(path, encoding="utf-8").read()
    nocode = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", nocode):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        count += 1
        line = nocode.count("\n", 0, m.start()) + 1
        file, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            fails.append("%s:%d: link %s: no file %s" % (
                os.path.relpath(path, DOCS), line, target, os.path.relpath(dest, DOCS)))
            continue
        if anchor and dest.endswith(".md"):
            heads = re.findall(r"^#+\s+(.*)$", open(dest, encoding="utf-8").read(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}
            if anchor not in slugs:
                fails.append("%s:%d: link %s: no heading #%s in %s" % (
                    os.path.relpath(path, DOCS), line, target, anchor, os.path.relpath(dest, DOCS)))
    return fails, count


def main(argv: List[str]) -> int:
    listing = "--list" in argv
    only = [a for a in argv if a != "--list"]
    if not os.access(os.path.join(ROOT, "build", "tide"), os.X_OK):
        print("test-docs: build/tide is missing: run make first", file=sys.stderr)
        return 2
    t0 = time.time()
    fails, ran, skipped, text = [], 0, [], 0
    for f in doc_files():
        rel = os.path.relpath(f, DOCS)
        for b in blocks(f):
            if only and not any(rel == o or b.where() == o for o in only):
                continue
            what, why = classify(b)
            if listing:
                print("%s %s %s" % (b.where(), what, why or ""))
                continue
            if what == "text":
                text += 1
                continue
            if what == "skip":
                skipped.append("%s (%s)" % (b.where(), why))
                continue
            t = time.time()
            rc, out, script = run_block(b)
            ran += 1
            # A figure the doc gives from this command's output must be in that output.
            missing = [mk[7:].strip() for mk in b.marks
                       if mk.startswith("expect ") and mk[7:].strip() not in out]
            if rc == 0 and missing:
                rc = "its output lacks %s" % ", ".join("'%s'" % x for x in missing)
            status = "ok" if rc == 0 else "FAILED (%s)" % rc
            print("test-docs: %s %s in %.1fs" % (b.where(), status, time.time() - t), flush=True)
            if rc != 0:
                tail = "\n".join(out.rstrip().split("\n")[-15:])
                fails.append("%s: block failed (exit %s)\n--- command ---\n%s\n--- output "
                             "(tail) ---\n%s" % (b.where(), rc, "\n".join(b.body), tail))
    if listing:
        return 0
    nfig = nmsg = nlink = 0
    corpus = message_corpus()
    for f in doc_files():
        ff, c = figure_checks(f)
        fails += ff
        nfig += c
        mf, c = message_checks(f, corpus)
        fails += mf
        nmsg += c
        lf, c = link_checks(f)
        fails += lf
        nlink += c
    for s in skipped:
        print("test-docs: skipped %s" % s)
    for f in fails:
        print("test-docs: FAIL %s" % f)
    print("test-docs: %s: %d blocks run, %d skipped, %d not commands; %d figures, %d "
          "messages and %d links checked; %d failures; %.0fs" % (
              "FAIL" if fails else "PASS", ran, len(skipped), text, nfig, nmsg, nlink,
              len(fails), time.time() - t0))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
