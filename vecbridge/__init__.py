"""vecbridge: move a vector database to a new embedding model without re-embedding it."""
from ._version import __version__
from .align import Alignment, LinearMap, NoMap, OrthogonalProcrustes
from .errors import ArtifactError, CheckFailed, InputError, StoreError, VecbridgeError

__all__ = ["__version__", "Alignment", "OrthogonalProcrustes", "LinearMap", "NoMap", "VecbridgeError", "InputError",
           "StoreError", "ArtifactError", "CheckFailed"]
