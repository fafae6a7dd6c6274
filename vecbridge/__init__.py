"""vecbridge: move a vector database to a new embedding model without re-embedding it."""
import sys as _sys

from ._deprecated import MOVED_MODULES as _MOVED_MODULES
from ._deprecated import OldPaths as _OldPaths
from ._version import __version__
from .align import Alignment, LinearMap, NoMap, OrthogonalProcrustes
from .errors import ArtifactError, CheckFailed, InputError, StoreError, VecbridgeError

__all__ = ["__version__", "Alignment", "OrthogonalProcrustes", "LinearMap", "NoMap", "VecbridgeError", "InputError",
           "StoreError", "ArtifactError", "CheckFailed"]

if not any(isinstance(f, _OldPaths) for f in _sys.meta_path):   # old module paths, kept for one release
    _sys.meta_path.append(_OldPaths(_MOVED_MODULES))
