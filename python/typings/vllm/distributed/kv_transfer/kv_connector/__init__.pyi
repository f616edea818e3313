# Type stubs for mypy only (python/typings/README.md): any other name is Any.
from typing import Any

def __getattr__(name: str) -> Any: ...
