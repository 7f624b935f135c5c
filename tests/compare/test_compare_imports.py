"""The compare package stays light: importing it loads neither torch nor sentence-transformers."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_torch() -> None:
    code = (
        "import sys, shadoweval.compare, shadoweval.compare.pair, shadoweval.compare.similarity\n"
        "import shadoweval.compare.encoders\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
