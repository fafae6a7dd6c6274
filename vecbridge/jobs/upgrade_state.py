"""Deprecated: moved to :mod:`vecbridge.jobs.upgrade.state`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.upgrade_state",
    {
        **dict.fromkeys(
            [
                "ORIGINS",
                "PRIORITIES",
                "UpgradeState",
                "_FIT_SAMPLE_TABLE",
                "_META_TYPES",
                "_SCORE_COLUMNS",
                "_document",
                "_key",
                "_shuffle",
                "_transaction",
                "exclusive",
                "record_digest",
            ],
            "vecbridge.jobs.upgrade.state",
        ),
    },
)
