"""The package's layers only point down, and no import cycle exists, not even through an import inside a function.

The import graph is read with ``ast`` from ``src/halluscope``: an edge for every ``import`` and ``from ... import``
wherever it stands (module level, inside a function, under ``if TYPE_CHECKING:``, since a type-only import still
makes the lower module's meaning depend on the upper one), relative imports resolved, and for every
``importlib.import_module("halluscope...")`` called with a literal name. ``from a.b import c`` goes to ``a.b.c``
when that is a module, else to ``a.b``; a package's parents are not counted (importing ``a.b.c`` runs ``a.b``'s
``__init__``, but that is the package's own business), so a package re-exporting its submodules is no cycle.

The layer check also counts every string constant that is exactly a submodule's name (or ``"module:attribute"``;
entry point group names aside): a registry that imports modules by name from a list of names depends on them as
much as an ``import`` does (lazily, so the cycle check leaves those out: the methods registry names its methods,
which import it to register).

Every module belongs to one layer of :data:`LAYERS` (bottom first) and may import its own layer and the ones
below it only. A module that matches no layer fails the test: a new module is placed explicitly.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from halluscope.plugins import GROUPS

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

# bottom first; a pattern is a module name, or "pkg.*" for every module below pkg (not pkg itself)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "halluscope._version",
            "halluscope._optional",
            "halluscope.records",
            "halluscope.config",
            "halluscope.config_files",
            "halluscope.sqlite_file",
            "halluscope.plugins",
            "halluscope.sync",
            "halluscope.permutations",
            "halluscope.options",
            "halluscope.contexts",
            "halluscope.report",
            "halluscope.text",
            "halluscope.text.*",
        ),
    ),
    ("llm", ("halluscope.llm", "halluscope.llm.*", "halluscope.prompts", "halluscope.tracing")),
    ("retrieval", ("halluscope.retrieval", "halluscope.retrieval.*")),
    (
        "stage protocols and registry",
        ("halluscope.stages", "halluscope.stages.protocols", "halluscope.stages.trace"),
    ),
    ("shared stages", ("halluscope.stages.*",)),
    ("methods", ("halluscope.methods", "halluscope.methods.*")),
    (
        "bench, generators, integrations",
        (
            "halluscope.bench",
            "halluscope.bench.*",
            "halluscope.generators",
            "halluscope.generators.*",
            "halluscope.integrations",
            "halluscope.integrations.*",
            "halluscope.verifier_training",
            "halluscope.tabular",
            "halluscope.testing",
            "halluscope.pytest_plugin",
        ),
    ),
    ("server", ("halluscope.server", "halluscope.server.*")),
    (
        "cli and the package facade",
        ("halluscope", "halluscope.__main__", "halluscope.server.__main__", "halluscope.cli", "halluscope.cli.*"),
    ),
]


def modules(root: Path = SRC) -> dict[str, Path]:
    found = {}
    for path in (root / "halluscope").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _import_module_name(node: ast.Call) -> str | None:
    """The literal module name of ``importlib.import_module("...")`` / ``import_module("...")``, else None."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called != "import_module" or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _names_a_module(text: str, known: dict[str, Path]) -> bool:
    """Whether ``text`` is a submodule's name (or ``"module:attribute"``): not the bare distribution name
    ``halluscope``, nor an entry point group's (``halluscope.stages`` is a group name as well as a module)."""
    name = text.partition(":")[0]
    return "." in name and name in known and text not in GROUPS


def imports_of(name: str, path: Path, known: dict[str, Path], *, named: bool = False) -> set[str]:
    """The modules ``name`` imports; with ``named``, also those it names in a string for a later import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
        elif isinstance(node, ast.Call) and (literal := _import_module_name(node)):
            targets.add(literal)
        elif (
            named
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _names_a_module(node.value, known)
        ):
            targets.add(node.value.partition(":")[0])  # a module named to be imported later ("pkg.mod:Attr" too)
    resolved = set()
    for target in targets:  # `import a.b.c` of a name that is no module: its nearest module
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def import_graph(root: Path = SRC, *, named: bool = False) -> dict[str, set[str]]:
    """Each module's imports; with ``named``, also the modules it names in strings (for the layer check: a
    registry that imports modules from a list of names depends on them; lazily, so it is no import cycle)."""
    known = modules(root)
    return {name: imports_of(name, path, known, named=named) for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := dfs(start)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer naming ``module`` exactly, else of the longest ``pkg.*`` above it."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if module == pattern:
                return index
            if pattern.endswith(".*") and module.startswith(pattern[:-1]) and (best is None or len(pattern) > best[0]):
                best = (len(pattern), index)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            low, high = layer_of(module), layer_of(target)
            if low is not None and high is not None and high > low:
                found.append(f"{module} ({LAYERS[low][0]}) imports {target} ({LAYERS[high][0]})")
    return found


# -- the checker itself ------------------------------------------------------------------------------------------


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    pkg = tmp_path / "halluscope"
    (pkg / "methods").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "methods" / "__init__.py").write_text("")
    (pkg / "methods" / "base.py").write_text("")
    (pkg / "records.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from halluscope.methods.base import Method\n"
    )
    (pkg / "config.py").write_text("def f():\n    from .methods import base\n")
    (pkg / "options.py").write_text("import importlib\nimportlib.import_module('halluscope.methods.base')\n")
    (pkg / "sync.py").write_text("BUILTINS = ('halluscope.methods.base:Method',)\n")
    graph = import_graph(tmp_path, named=True)
    assert import_graph(tmp_path)["halluscope.sync"] == set()
    assert graph["halluscope.records"] == {"halluscope.methods.base"}  # a type-only import counts
    assert graph["halluscope.config"] == {"halluscope.methods.base"}  # inside a function, relative
    assert graph["halluscope.options"] == {"halluscope.methods.base"}  # a module imported by name
    assert graph["halluscope.sync"] == {"halluscope.methods.base"}  # a module named for a later import
    assert upward_imports(graph) == [
        f"halluscope.{m} (foundation) imports halluscope.methods.base (methods)"
        for m in ("config", "options", "records", "sync")
    ]


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in modules() if layer_of(m) is None)
    assert not unplaced, "modules in no layer of tests/test_layers.py LAYERS: " + ", ".join(unplaced)


# -- the package ---------------------------------------------------------------------------------------------------


def test_no_import_cycle_in_halluscope():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_a_higher_layer():
    upward = upward_imports(import_graph(named=True))
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_the_built_in_stage_modules_are_the_packages_entry_points():
    """The registry finds the built-in stages through the ``halluscope.stages`` entry points of halluscope's own
    metadata; the methods package names the same modules (for a source checkout whose installed metadata is
    older), and each of them registers at least one stage."""
    from halluscope.methods import BUILTIN_STAGE_MODULES
    from halluscope.stages import stages

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = project["entry-points"]["halluscope.stages"]
    assert sorted(declared.values()) == sorted(BUILTIN_STAGE_MODULES)
    registering = {spec.module for spec in stages()}
    for module in BUILTIN_STAGE_MODULES:
        assert any(m == module or m.startswith(module + ".") for m in registering), module


@pytest.mark.parametrize(
    "module",
    [
        "halluscope.stages",
        "halluscope.stages.protocols",
        "halluscope.retrieval",
        "halluscope.options",
    ],
)
def test_a_lower_layer_imports_without_the_methods_package(module):
    """At run time too: importing the stage registry (or anything below the methods) loads no method module."""
    code = f"import sys, {module}; print(any(m.startswith('halluscope.methods') for m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    ).stdout.strip()
    assert out == "False"


def test_the_cli_lists_the_built_in_stages_in_a_fresh_process():
    """``halluscope stages`` alone (no method imported before it) lists the shared stages and the methods' own,
    and no stage of a kind that is none."""
    out = subprocess.run(
        [sys.executable, "-m", "halluscope", "stages"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    ).stdout
    kinds = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ") and " " in line}
    assert "[halluscope.stages.decomposers]" in out and "[halluscope.methods.dove.stages]" in out
    assert {"decomposer", "context_selector", "verifier", "aggregator", "localizer"} <= kinds
    assert "generator" not in kinds


def _own_metadata(folder: Path, stage_modules: dict[str, str]) -> None:
    """A halluscope dist-info in ``folder`` declaring ``stage_modules`` as its ``halluscope.stages`` entry points
    (put first on the path, it stands for the installed metadata, whatever that is in this environment)."""
    info = folder / "halluscope-0.dev0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: halluscope\nVersion: 0.dev0\n")
    (info / "entry_points.txt").write_text(
        "[halluscope.stages]\n" + "".join(f"{name} = {module}\n" for name, module in stage_modules.items())
    )


def test_the_registry_finds_built_in_stages_through_the_entry_points_alone(tmp_path):
    """With halluscope's metadata declaring only the shared decomposers, a fresh process that imports the registry
    (and no method) finds the ``sentences`` decomposer; with the entry points of pyproject.toml it finds every
    built-in stage the methods package finds."""
    _own_metadata(tmp_path, {"sentences": "halluscope.stages.decomposers"})
    code = (
        "import sys; from halluscope.stages import stages; found = stages('decomposer'); "
        "print([s.name for s in found], any(m.startswith('halluscope.methods') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": f"{tmp_path}:{SRC}", "PATH": ""},
    ).stdout.strip()
    assert out == "['sentences'] False"

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    full = tmp_path / "full"
    full.mkdir()
    _own_metadata(full, declared["halluscope.stages"])
    code = "from halluscope.stages import stages; print(len(stages()))"
    alone = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": f"{full}:{SRC}", "PATH": ""},
    ).stdout.strip()
    with_methods = subprocess.run(
        [sys.executable, "-c", "import halluscope.methods; " + code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    ).stdout.strip()
    assert int(alone) == int(with_methods) > 30
