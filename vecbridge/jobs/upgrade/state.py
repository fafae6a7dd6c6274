"""The state of one model upgrade (:mod:`vecbridge.runtime.upgrade_state`), under the name the verbs import."""
from ...runtime.upgrade_state import UpgradeState, exclusive

__all__ = ["UpgradeState", "exclusive"]
