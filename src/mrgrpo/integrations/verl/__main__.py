"""``python -m mrgrpo.integrations.verl``: see :mod:`mrgrpo.integrations.verl.launch`."""

import sys

from mrgrpo.errors import UserError
from mrgrpo.integrations.verl.launch import main

if __name__ == "__main__":
    try:
        main()
    except UserError as error:
        sys.exit(f"mrgrpo: {error}")
