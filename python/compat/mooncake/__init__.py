"""A stand-in for the ``mooncake`` package that runs Mooncake-API code on tide.

Put ``python/compat`` on PYTHONPATH (after ``python``) only where the real Mooncake is not
wanted: ``mooncake.store`` then resolves to tide.mooncake. See python/README.md.
"""
