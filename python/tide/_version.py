"""The version this package was written for: libtide's, as include/tide.h defines it.

pip's metadata takes VERSION from here (python/pyproject.toml), and _lib loads the
installed library by the soname of MAJOR (libtide.so.MAJOR). tests/python/test_install.py
fails when these disagree with TIDE_VERSION_MAJOR/MINOR/PATCH in include/tide.h.
``tide.__version__`` is the loaded library's own ``tide_version()``.
"""

MAJOR = 0
MINOR = 1
PATCH = 0
VERSION = "0.1.0"
