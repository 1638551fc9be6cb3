"""docs/paper_defaults.md names only settings that exist: every ``key=value`` is an option of some
method (and the value one it accepts), every ``--flag`` a CLI option, every ``HALLUSCOPE_*`` variable read by
the code."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from halluscope.methods import list_methods, method_class

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "paper_defaults.md").read_text(encoding="utf-8")
SOURCE_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "halluscope").rglob("*.py"))
CLI_TEXT = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "halluscope" / "cli").glob("*.py"))

# reproduce builder options (--build KEY=VALUE) live in the builders, not in a method's options
BUILD_OPTIONS = {
    "gold_evidence",
    "gold_samples",
    "gold_consensus",
    "level",
    "max_events",
    "difficulties",
    "facts_from",
    "weave",
    "complexities",
    "max_sentences",
    "perturbations",
    "unit",
    "insert_with",
    "gold_voters",
}
# suite options (SuiteContext.extra) live in the suites, not in a method's options
SUITE_OPTIONS = {"rai_flagged"}


def _spans() -> list[str]:
    return re.findall(r"`([^`]+)`", DOC)


def _settings() -> list[tuple[str, str]]:
    found = []
    for span in _spans():
        for key, value in re.findall(r"(?:^|\s)([a-z_]+)=([^\s,;)]+)", span):
            if key != "key":  # the doc's "-o key=value" explains the syntax
                found.append((key, value))
    return found


def _fields() -> dict[str, list[typing.Any]]:
    fields: dict[str, list[typing.Any]] = {}
    for name in list_methods():
        for key, info in method_class(name).Options.model_fields.items():
            fields.setdefault(key, []).append(info.annotation)
    return fields


def _accepts(annotation: typing.Any, value: str) -> bool:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return value in {str(a) for a in args}
    if args:  # Optional[...] / unions: any member accepting it; "null" is None (parse_options reads it so)
        if value == "null" and type(None) in args:
            return True
        return any(_accepts(a, value) for a in args if a is not type(None))
    if annotation is bool:
        return value in ("true", "false")
    if annotation is int:
        return value.isdigit() or value == "N"
    if annotation is float:
        return re.fullmatch(r"[0-9.]+", value) is not None
    return True  # free-form (names, lists)


def test_the_doc_names_settings():
    assert len(_settings()) > 30  # the parser finds them (a broken regex would make the next test vacuous)


@pytest.mark.parametrize("key,value", sorted(set(_settings())))
def test_every_key_value_named_is_an_option_with_an_accepted_value(key, value):
    fields = _fields()
    if key in BUILD_OPTIONS | SUITE_OPTIONS and key not in fields:
        assert f'"{key}"' in SOURCE_TEXT
        return
    assert key in fields, f"paper_defaults.md names {key}={value}, which no method has"
    if value.startswith("<"):
        return  # a placeholder such as <method>
    assert any(_accepts(a, value) for a in fields[key]), f"{key}={value} is not a value {key} accepts"


def test_every_flag_and_variable_named_exists():
    flags = sorted({f for span in _spans() for f in re.findall(r"(--[a-z][a-z-]+)", span)})
    assert flags, "no --flag found in the doc"
    missing = [
        f
        for f in flags
        if f'"{f}"' not in CLI_TEXT  # typer names a flag after its parameter otherwise
        and not re.search(rf"\b{f[2:].replace('-', '_')}: Annotated", CLI_TEXT)
    ]
    assert not missing, f"paper_defaults.md names CLI flags that do not exist: {missing}"
    variables = sorted(set(re.findall(r"HALLUSCOPE_[A-Z_]+", DOC)))
    from halluscope.config import Config

    read = [
        v
        for v in variables
        if f'"{v}"' in SOURCE_TEXT  # read by name, or a Config field (HALLUSCOPE_<FIELD>)
        or v.removeprefix("HALLUSCOPE_").lower() in Config.model_fields
    ]
    assert variables and read == variables, f"unknown variables: {sorted(set(variables) - set(read))}"


def test_no_row_is_left_marked_as_being_changed():
    assert "◆" not in DOC and "being changed" not in DOC


# --- every stated default is the actual default ------------------------------------------------------------------

# the methods each paper's section is about (the long-document section: every claim method takes its retrieval)
SECTION_METHODS = {
    "000": ("dove", "geval"),
    "001": ("dcr", "improve", "geval"),
    "002": ("localize", "factscore"),
    "003": ("dcr", "dove", "factscore", "probe"),
    "004": ("probe",),
}
# the first `key=value` of an option in a "halluscope default" cell is its stated default, except these, which the
# cell names as a setting someone chooses (a reproduce row's, an option, the paper's): (section, key) -> why
NOT_STATED_AS_DEFAULT = {
    ("001", "prompt"): "the setting reproduce dcr's G-Eval row runs",
    ("002", "filter"): "the 2-step classifiers are named as options",
    ("002", "hint"): "CoT&Hint is named as an option that matches the paper",
    ("000", "decomposer"): "the extensions, named by the option that chooses them (none chosen: the paper's dove)",
    ("001", "decomposer"): "the paragraph-level baseline, named by the option that chooses it (none: sentences)",
    ("002", "deduplicator"): "the paper's llm and the options, named by the option that chooses them (none: llm)",
    ("004", "evidence_finder"): "the extension, named by the option that chooses it (none chosen: the paper's probe)",
    ("004", "judges"): "the paper's voting, given as options",
    ("004", "samples"): "the paper's voting, given as options",
    ("004", "gold_evidence"): "a reproduce builder option (no method has it)",
    ("004", "gold_voters"): "a reproduce builder option (no method has it); the named value is the alternative",
    (
        "001",
        "rai_flagged",
    ): "an option of the rai_improvement suite (no method has it); the named value is the alternative",
}


def _default_cells() -> list[tuple[str, str]]:
    """(section, text) of each paper section's "halluscope default" cells."""
    found, section = [], None
    for line in DOC.splitlines():
        if line.startswith("## "):
            m = re.match(r"## (\d{3}) ", line)
            section = m.group(1) if m else None
            continue
        if section is None or not line.startswith("| ") or line.startswith(("| what ", "|---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"a row of section {section} does not have 4 cells: {line[:80]}"
        found.append((section, cells[2]))
    return found


def _first_mentions(pattern: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for the first ``pattern`` match (key, value) per key in each default cell."""
    found = []
    for section, cell in _default_cells():
        first: dict[str, str] = {}
        for span in re.findall(r"`([^`]+)`", cell):
            for key, value in re.findall(pattern, span):
                first.setdefault(key, value)
        found += [(section, k, v) for k, v in first.items()]
    return found


OPTION = r"(?:^|\s)([a-z_]+)=([^\s,;)]+)"


def _stated_defaults() -> list[tuple[str, str, str]]:
    """(section, key, value) for the first ``key=value`` of each option in each row's "halluscope default" cell."""
    return [(s, k, v) for s, k, v in _first_mentions(OPTION) if (s, k) not in NOT_STATED_AS_DEFAULT]


def _as_doc_value(default: typing.Any) -> str:
    if default is None:
        return "null"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_the_doc_states_defaults_and_every_exception_is_still_in_it():
    stated = _stated_defaults()
    assert len(stated) > 20  # the parser finds them
    mentioned = {(s, k) for s, k, _ in _first_mentions(OPTION)}
    assert set(NOT_STATED_AS_DEFAULT) <= mentioned, "an exception names a mention the doc no longer has"


@pytest.mark.parametrize("section,key,value", _stated_defaults())
def test_every_stated_default_is_the_actual_default(section, key, value):
    methods = [m for m in SECTION_METHODS[section] if key in method_class(m).Options.model_fields]
    assert methods, (
        f"paper_defaults.md section {section} states {key}={value}, but none of {SECTION_METHODS[section]} has {key}"
    )
    if value.startswith("<") or value == "N":
        return  # a placeholder
    for name in methods:
        actual = _as_doc_value(method_class(name).Options.model_fields[key].default)
        assert actual == value, f"section {section} states {key}={value}; {name}'s default is {actual}"


def test_every_stated_environment_default_is_the_config_default():
    from halluscope.config import Config

    stated = [
        (k, v) for _, k, v in _first_mentions(r"HALLUSCOPE_([A-Z_]+)=([^\s,;)]+)") if k.lower() in Config.model_fields
    ]  # HALLUSCOPE_CLAIM_MATCHING is the suite's, checked below
    assert stated
    for name, value in stated:
        assert _as_doc_value(Config.model_fields[name.lower()].default) == value, f"HALLUSCOPE_{name}={value}"


def test_claim_matching_is_lexical_unless_chosen(monkeypatch):
    """The PROBE row says lexical by default: what the probe_steps suite uses with nothing set."""
    from halluscope.bench.suite_probe.matching import claim_matcher

    assert "lexical by default" in DOC
    assert claim_matcher()[2].startswith("lexical")
    import inspect

    from halluscope.bench.suite_probe import suite

    assert 'or "lexical"' in inspect.getsource(suite.probe_steps_suite)


# --- citations by section, as the papers number them --------------------------------------------------------------


def _seeds_dir() -> Path | None:
    import os

    for candidate in (
        os.environ.get("HALLUSCOPE_SEEDS_DIR"),
        ROOT.parent / "shared" / "seeds",
        ROOT.parents[1] / "shared" / "seeds",
    ):
        if candidate and Path(candidate).is_dir() and list(Path(candidate).glob("00[0-4]_*.txt")):
            return Path(candidate)
    return None


def _section_of(paper: str, phrase: str) -> str:
    """The section the paper prints ``phrase`` in, as the doc cites it: ``§4.2`` or ``App. A``."""
    at = paper.index(phrase)
    heading = None
    for m in re.finditer(r"^(?:#+ )?(\d+(?:\.\d+)*|[A-J](?:\.\d+)*) [A-Z][^\n]{2,80}$", paper[:at], re.MULTILINE):
        heading = m.group(1)
    assert heading is not None, phrase
    return f"§{heading}" if heading[0].isdigit() else f"App. {heading}"


# (paper file prefix, the doc row's "what", a phrase the paper prints where the row's fact is stated)
CITED = [
    ("001", "α, β in", "we set both α and β in Eq. (3) to 0"),
    ("001", "temperature", "We set the temperature to 0.0"),
    ("001", "correlation level", "summary-level Spearman"),
    ("000", "sorter input order", "The sorter reorganizes the verified correct event facts"),
    ("000", "LLM-as-evaluator baseline (G-Eval)", "we apply greedy decoding with a temperature of 0"),
    ("003", "sentence encoder", "using a pre-trained sentence encoder"),
    ("004", "consensus", "at least 3 out of 4 models agree"),
    ("004", "claim matching (steps 1 and 4)", "reusing the semantic claim matching results"),
]


@pytest.mark.parametrize("paper,what,phrase", CITED)
def test_the_paper_cell_cites_the_section_the_paper_prints_it_in(paper, what, phrase):
    seeds = _seeds_dir()
    if seeds is None:
        pytest.skip("the papers' text is not here (set HALLUSCOPE_SEEDS_DIR)")
    text = next(seeds.glob(f"{paper}_*.txt")).read_text(encoding="utf-8")
    row = next(line for line in DOC.splitlines() if line.startswith(f"| {what}"))
    paper_cell = row.strip().strip("|").split(" | ")[1]
    assert _section_of(text, phrase) in paper_cell, (what, _section_of(text, phrase), paper_cell)


# --- the vote rule, as PROBE's docstrings state it --------------------------------------------------------------


def test_both_vote_rule_docstrings_state_what_the_code_counts():
    """PROBE: "at least 3 out of 4 models agree" - the PASS share of ALL the votes; an unusable vote counts
    against. Both docstrings say so, and the code counts so (with consensus 1, 3 PASS and 1 unusable vote of 4
    is not accepted; a share of the valid votes would accept it)."""
    import halluscope.methods.probe as probe
    from halluscope.methods.probe import judge
    from halluscope.methods.probe.judge import EvidenceJudgment, Vote
    from halluscope.records import Evidence

    for doc in (probe.__doc__, judge.__doc__):
        flat = " ".join((doc or "").split())
        assert "of ALL the votes" in flat and "valid votes reaches" not in flat
    votes = [Vote("a", 0, True), Vote("b", 0, True), Vote("c", 0, True), Vote("d", 0, None)]
    judgment = EvidenceJudgment("c1", Evidence(text="x"), votes, consensus=1.0)
    assert judgment.accepted is False and judgment.pass_fraction == 0.75
    assert "| unusable votes |" in DOC  # the part the paper does not discuss is recorded as a departure
