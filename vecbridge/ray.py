"""Deprecated: moved to :mod:`vecbridge.integrations.ray`."""

from ._deprecated import moved

__getattr__ = moved(
    "vecbridge.ray",
    {
        **dict.fromkeys(
            [
                "COLUMNS",
                "CollectionDatasink",
                "CollectionDatasource",
                "MODES",
                "WRITE_BYTES",
                "WriteSummary",
                "_ROW_OVERHEAD",
                "__all__",
                "_dim_of",
                "_id_array",
                "_payload_json",
                "_payloads",
                "_refuse_single_process",
                "_sources",
                "_url_of",
                "from_block",
                "read_collection",
                "read_range",
                "to_block",
                "write_collection",
            ],
            "vecbridge.integrations.ray",
        ),
    },
)
