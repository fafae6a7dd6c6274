"""``python -m vecbridge.cli``: the ``vecbridge`` command."""
from . import main

main()
