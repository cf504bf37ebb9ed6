from .base import Backend
from .local import LocalBackend

__all__ = ["Backend", "LocalBackend"]
