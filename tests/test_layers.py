"""The package's layers only point down, and no import cycle exists, not even through an import inside a function.

The import graph is read with ``ast`` from ``src/halluscope``: an edge for every ``import`` and ``from ... import``
wherever it stands (module level, inside a function, under ``if TYPE_CHECKING:``, since a type-only import still
makes the lower module's meaning depend on the upper one), relative imports resolved, and for every
``importlib.import_module(...)`` / ``__import__(...)`` whose name the checker can read: a literal, a relative name
with its package, a ``+`` concatenation of literals, or every module below the constant start of an f-string. A
module name it cannot read (a variable) is allowed only in the registries of :data:`DYNAMIC_IMPORTERS`; ``exec``
and ``eval`` nowhere. halluscope's own entry points name modules of the layers their group may load, and inside
the methods layer one method imports another only where :data:`METHOD_CROSSINGS` says why.

``from a.b import c`` goes to ``a.b.c`` when that is a module, else to ``a.b``; a package's parents are not
counted (importing ``a.b.c`` runs ``a.b``'s ``__init__``, but that is the package's own business), so a package
re-exporting its submodules is no cycle.

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
            "halluscope.citation_columns",
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


IMPORT_CALLS = ("import_module", "__import__")
CODE_CALLS = ("exec", "eval")  # code run from a string: its imports cannot be followed

# Modules that import a module named at run time, and where the names come from (each is checked elsewhere).
DYNAMIC_IMPORTERS = {
    "halluscope._optional": "the optional dependency its caller names (a third-party package)",
    "halluscope._lazy": "the names a package __init__ imports under TYPE_CHECKING (those imports are edges here)",
    "halluscope.stages": "halluscope's own halluscope.stages entry points (checked below, with their layers)",
    "halluscope.methods": "halluscope's own halluscope.methods entry points (checked below, with their layers)",
    "halluscope.server.warmup": "FIRST_USE_MODULES, literal names in the module (edges of the layer check)",
    "halluscope.bench.suites": "SUITE_MODULES, literal names in the module (edges of the layer check)",
}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _text(node: ast.expr | None) -> tuple[str, bool] | None:
    """A string expression's constant text and whether that is all of it (an f-string or a ``+`` concatenation
    whose start is constant gives that start and False); None when it does not start with a constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr):
        prefix = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return (prefix, False) if prefix else None
            prefix += part.value
        return prefix, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _text(node.left)
        if left is None or not left[1]:
            return left
        right = _text(node.right)
        return (left[0] + right[0], right[1]) if right is not None else (left[0], False)
    return None


def _anchor(node: ast.Call, name: str, package: str) -> str | None:
    """The package a relative ``import_module(".x", package)`` is resolved against."""
    given = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
    if isinstance(given, ast.Name) and given.id == "__name__":
        return name
    if isinstance(given, ast.Name) and given.id == "__package__":
        return package
    found = _text(given)
    return found[0] if found is not None and found[1] else None


def dynamic_targets(node: ast.Call, name: str, package: str, known: dict[str, Path]) -> set[str] | None:
    """The modules an ``import_module(...)`` / ``__import__(...)`` call can import: its literal name (a relative
    one resolved), or every module below the constant start of an f-string or concatenation; None when the
    checker cannot tell (a name from a variable). An empty set: the call is no import call."""
    if _called(node) not in IMPORT_CALLS or not node.args:
        return set()
    found = _text(node.args[0])
    if found is None:
        return None
    text, complete = found
    if text.startswith("."):
        anchor = _anchor(node, name, package)
        if anchor is None:
            return None
        dots = len(text) - len(text.lstrip("."))
        base = ".".join(anchor.split(".")[: len(anchor.split(".")) - (dots - 1)])
        text = f"{base}.{text[dots:]}" if text[dots:] else base
    if complete:
        return {text}
    if not text.startswith("halluscope"):
        return set()  # a third-party package's module: no edge of this package
    return {m for m in known if m.startswith(text)} or None


def unfollowed_calls(name: str, path: Path, known: dict[str, Path]) -> list[str]:
    """The dynamic imports the checker cannot follow, and every ``exec`` / ``eval``, as ``module:line call``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        called = _called(node)
        if (called in CODE_CALLS and isinstance(node.func, ast.Name)) or (
            called in IMPORT_CALLS and dynamic_targets(node, name, package, known) is None
        ):
            found.append(f"{name}:{node.lineno} {called}")
    return found


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
        elif isinstance(node, ast.Call):
            targets.update(dynamic_targets(node, name, package, known) or ())
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


def test_the_checker_follows_f_string_concatenated_and_relative_imports_and_flags_exec(tmp_path):
    pkg = tmp_path / "halluscope"
    (pkg / "methods").mkdir(parents=True)
    for name in ("__init__.py", "methods/__init__.py", "methods/base.py", "methods/extra.py"):
        (pkg / name).write_text("")
    (pkg / "records.py").write_text("import importlib\nk = 'x'\nimportlib.import_module(f'halluscope.methods.{k}')\n")
    (pkg / "config.py").write_text("from importlib import import_module\nimport_module('halluscope.' + 'methods.base')")
    (pkg / "methods" / "dcr.py").write_text("import importlib\nimportlib.import_module('.base', __package__)\n")
    (pkg / "options.py").write_text("import importlib\nname = 'x'\nimportlib.import_module(name)\nexec('import os')\n")
    known = modules(tmp_path)
    graph = import_graph(tmp_path)
    assert graph["halluscope.records"] == {  # an f-string: every module its constant start can name
        "halluscope.methods.base",
        "halluscope.methods.dcr",
        "halluscope.methods.extra",
    }
    assert graph["halluscope.config"] == {"halluscope.methods.base"}
    assert graph["halluscope.methods.dcr"] == {"halluscope.methods.base"}
    assert unfollowed_calls("halluscope.options", pkg / "options.py", known) == [
        "halluscope.options:3 import_module",
        "halluscope.options:4 exec",
    ]
    assert unfollowed_calls("halluscope.records", pkg / "records.py", known) == []


def test_no_import_the_checker_cannot_follow():
    """No ``exec`` / ``eval`` in the package, and a module name the checker cannot read (a variable) only in the
    registries of :data:`DYNAMIC_IMPORTERS`, each of which still does so (the list shrinks with the code)."""
    known = modules()
    found = [call for name, path in known.items() for call in unfollowed_calls(name, path, known)]
    assert not [c for c in found if c.endswith((" exec", " eval"))], found
    importers = {call.partition(":")[0] for call in found}
    assert importers == set(DYNAMIC_IMPORTERS), found


# the layers a module named by each of halluscope's own entry point groups may be in
ENTRY_POINT_LAYERS = {
    "halluscope.stages": ("shared stages", "methods"),
    "halluscope.methods": ("methods",),
    "pytest11": ("bench, generators, integrations",),
}


def test_entry_points_name_modules_of_their_layer():
    """halluscope's own entry points are imports its registries make by name: each names a module of the package,
    in a layer its group may load (a stage in the stages or methods layers, never in the server or the CLI)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    known = modules()
    wrong = []
    for group, table in project["entry-points"].items():
        for entry, target in table.items():
            module = target.partition(":")[0]
            layer = layer_of(module)
            if module not in known or layer is None or LAYERS[layer][0] not in ENTRY_POINT_LAYERS[group]:
                wrong.append(f"{group} {entry} = {target}")
    for script, target in project["scripts"].items():
        if target.partition(":")[0] not in known:
            wrong.append(f"script {script} = {target}")
    assert not wrong


# Inside the methods layer: the modules every method shares, and the imports from one method into another that
# the code makes on purpose (with why). Any other import across methods fails.
SHARED_METHOD_MODULES = (
    "base",
    "batching",
    "calibration",
    "details",
    "encoder_models",
    "named",
    "options",
    "pipeline",
    "verdict_first",
    "verdict_facts",
    "verdict_reason",
)
METHOD_CROSSINGS = {
    ("pipeline", "gate"): "the claim pipeline applies a gate stage's decisions as verdicts (gate_verdict)",
    ("encoders", "gate"): "the encoder gate marks target spans as the lexical gate does (target_spans)",
    ("improve", "dcr"): "RAI (improve) is DCR's reason-assisted improver: DCR's prompts, options and details",
    ("improve", "rai"): "RAI's rewrite step (replies, prompts, splicing), re-exported by improve",
    ("guard", "citations"): "the RAG guard acts on the citation check's verdicts of each sentence",
    ("fused", "gate"): "the fused verifier's claim features are the lexical gate's findings on each claim",
    ("fused", "rouge"): "the fused verifier's claim features include ROUGE precision against the best window",
}


def _method_unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "methods" else None


def test_methods_import_each_other_only_where_listed():
    crossings = set()
    for module, targets in import_graph().items():
        unit = _method_unit(module)
        for target in targets:
            other = _method_unit(target)
            if unit and other and other != unit and other not in SHARED_METHOD_MODULES:
                crossings.add((unit, other))
    assert crossings == set(METHOD_CROSSINGS)


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
    assert _fresh(code) == str(sorted({"base", "batching", "dcr", "details"}))


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
