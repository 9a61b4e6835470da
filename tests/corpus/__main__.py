"""python -m tests.corpus OUT [ASSIGNMENT ...]: write the corpus (every lab by default) for `make grade`."""

import sys
from pathlib import Path

from nbplumbing.adapter import assignment_names
from tests.corpus import write

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    written = write(Path(sys.argv[1]), sys.argv[2:] or assignment_names())
    print(f"wrote {len(written)} submissions into {sys.argv[1]}")
