"""``mooncake.store`` for code written against Mooncake's Python API: tide.mooncake."""

from tide.mooncake import *  # noqa: F401,F403
from tide.mooncake import MooncakeDistributedStore, ReplicateConfig  # noqa: F401
