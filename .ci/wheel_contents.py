"""Build halluscope's wheel and fail when it holds anything but the package (no test or load-test module)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TEST_ONLY = ("stub", "stub_server", "loadtest", "conftest", "tests", "benchmarks")


def main() -> int:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out, "."],
            check=True,
        )
        (wheel,) = Path(out).glob("halluscope-*.whl")
        names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    stray = [
        n for n in modules if not n.startswith("halluscope/") or set(Path(n).with_suffix("").parts) & set(TEST_ONLY)
    ]
    print(f"wheel {wheel.name}: {len(modules)} modules, {len(stray)} outside the package or test-only")
    for name in stray:
        print("  ", name)
    return 1 if stray or not modules else 0


if __name__ == "__main__":
    sys.exit(main())
