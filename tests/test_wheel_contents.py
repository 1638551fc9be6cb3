"""The wheel holds the package only: ``[tool.hatch.build.targets.wheel]`` packs ``src/halluscope`` and nothing
else, and no module there is test or benchmark code (the stub endpoint and the load-test helpers live in
``tests/``). ``.ci/run`` also builds the wheel and lists it (``.ci/wheel_contents.py``)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "halluscope"
TEST_ONLY = ("stub", "stub_server", "loadtest", "conftest")


def test_the_wheel_packs_the_package_folder_only():
    hatch = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["hatch"]["build"]
    wheel = hatch["targets"]["wheel"]
    assert wheel == {"packages": ["src/halluscope"]}
    assert not {"include", "force-include", "only-include", "sources"} & (set(hatch) | set(wheel))


def test_no_module_of_the_package_is_test_code():
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.stem in TEST_ONLY or any(part in TEST_ONLY for part in path.relative_to(PACKAGE).parts[:-1])
    ]
    assert not found


def test_no_module_of_the_package_imports_tests_or_benchmarks():
    importing = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n.split(".")[0] in ("tests", "benchmarks") for n in names):
                importing.append(str(path.relative_to(PACKAGE)))
    assert not importing
