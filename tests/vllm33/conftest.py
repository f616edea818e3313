"""Fixtures of the tests against a real vLLM's own classes (no engine): vLLM 0.33.0 in
.venv-vllm33 (scripts/vllm33-env.sh), and the check-config differential test also in vLLM
0.32's .venv-vllm. Run by `make test-vllm33` against build/libtide.so and build/tide.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TIDE_LIB", os.path.join(BUILD, "libtide.so"))
os.environ.setdefault("TIDE_BIN", os.path.join(BUILD, "tide"))
