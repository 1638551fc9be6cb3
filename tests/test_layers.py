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
import json
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
            "halluscope._lazy",
            "halluscope.records",
            "halluscope.config",
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
        ("halluscope.stages", "halluscope.stages.protocols", "halluscope.stages.trace", "halluscope.stage_protocols"),
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


def _declared(group: str) -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"][group]


def test_the_built_in_stages_are_the_packages_entry_points():
    """The one list of the built-in stages is halluscope's ``halluscope.stages`` entry points: each ``KIND.NAME`` =
    ``module:Class`` is a stage its module registers under that kind and name, and every stage halluscope registers
    is listed."""
    from halluscope.stages import stages

    registered = {
        f"{spec.protocol}.{spec.name}": f"{spec.module}:{spec.factory.__qualname__}"
        for spec in stages()
        if spec.module.startswith("halluscope.")
    }
    assert registered == _declared("halluscope.stages")


def test_the_built_in_methods_are_the_packages_entry_points():
    from halluscope.methods import list_methods, method_class

    declared = _declared("halluscope.methods")
    assert sorted(declared) == list_methods()
    for name, target in declared.items():
        cls = method_class(name)
        assert (cls.name, f"{cls.__module__}:{cls.__qualname__}") == (name, target)


def _fresh(code: str, path: str = str(SRC)) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": path, "PATH": ""}
    ).stdout.strip()


def test_listing_the_stages_imports_no_method_module_it_does_not_list():
    """``stages()`` in a fresh process imports the modules of the stages it lists and what they import, nothing
    more: no method's composition (``DCR``, the claim pipeline, ...) and no module of a stage it does not list."""
    listed = (
        "import sys, json, halluscope.stages as s; found = s.stages(); "
        "print(json.dumps([sorted({x.module for x in found}), sorted(m for m in sys.modules "
        "if m.startswith('halluscope.methods'))]))"
    )
    modules_listed, imported = json.loads(_fresh(listed))
    alone = json.loads(
        _fresh(
            f"import sys, json, importlib\nfor m in {modules_listed!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('halluscope.methods'))))"
        )
    )
    assert imported == alone
    compositions = {target.partition(":")[0] for target in _declared("halluscope.methods").values()}
    assert "halluscope.methods.pipeline" not in imported
    assert not (compositions - set(modules_listed)) & set(imported)


def test_a_stage_lookup_imports_only_that_stages_module():
    code = (
        "import sys, halluscope.stages as s; s.stage_spec('verifier', 'dcr'); "
        "print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('halluscope.methods.')}))"
    )
    assert _fresh(code) == str(sorted({"base", "batching", "dcr", "details", "options"}))


def test_the_package_lazily_exports_what_it_imports_for_type_checkers():
    """A method package's ``__init__`` imports its names under ``TYPE_CHECKING`` only; each resolves at run time
    to the object of the module named there."""
    import importlib

    from halluscope._lazy import type_checking_imports

    for package in ("dcr", "dove", "factscore", "probe"):
        name = f"halluscope.methods.{package}"
        path = SRC / "halluscope" / "methods" / package / "__init__.py"
        exports = type_checking_imports(path.read_text(encoding="utf-8"), name)
        mod = importlib.import_module(name)
        assert set(mod.__all__) <= set(exports), package
        for export, (module, attribute) in exports.items():
            assert getattr(mod, export) is getattr(importlib.import_module(module), attribute)
        with pytest.raises(AttributeError):
            mod.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "module",
    [
        "halluscope.stages",
        "halluscope.stages.protocols",
        "halluscope.stage_protocols",
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


def test_an_installed_package_reads_its_stages_from_its_metadata(tmp_path):
    """Without a source checkout's pyproject.toml beside the package (an installed wheel), the list is the
    installed metadata's: declaring only the ``sentences`` decomposer, a fresh process finds that one and imports
    no method; an older metadata's bare module names still register their stages."""
    _own_metadata(tmp_path, {"decomposer.sentences": "halluscope.stages.decomposers:SentenceDecomposer"})
    code = (
        "import sys, pathlib, halluscope.plugins as p; p.SOURCE_PYPROJECT = pathlib.Path('/nonexistent'); "
        "from halluscope.stages import stages; found = stages('decomposer'); "
        "print([s.name for s in found], any(m.startswith('halluscope.methods') for m in sys.modules))"
    )
    assert _fresh(code, f"{tmp_path}:{SRC}") == "['sentences'] False"
    older = tmp_path / "older"
    older.mkdir()
    _own_metadata(older, {"sentences": "halluscope.stages.decomposers", "dove": "halluscope.methods.dove.stages"})
    assert _fresh(code, f"{older}:{SRC}") == "['dove', 'sentences'] True"
