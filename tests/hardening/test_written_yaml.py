"""Any string, in any field of any YAML file kcatalog writes (manifests and settings from import-registry, tuned
tables, plans), reads back as itself: the emitter quotes what the loader would read otherwise and escapes every
line break and control character, so no value becomes structure. What cannot be written is refused with a
diagnostic, and then nothing is written."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import kcatalog
from kcatalog.diagnostics import Diagnostics
from kcatalog.migrate.source import RegistryDump
from kcatalog.read.files import SourceFile
from kcatalog.read.yaml_nodes import parse_yaml
from kcatalog.runtime.planning import ResolvedPlan, plan_text
from kcatalog.tools.cli import main
from kcatalog.tools.tuning import Measured, Provenance, table_text
from kcatalog.validate.schema import BACKEND_PATTERN
from kcatalog.validate.tables import Plan, TunedTable
from kcatalog.validate.validator import validate_sources
from kcatalog.write.yaml_text import Flow, UnwritableValue, comment, document

# Strings YAML reads as something else, or as structure, unless written with care.
HOSTILE = [
    "no", "yes", "on", "off", "y", "n", "NO", "True", "null", "Null", "~", "", "KDA", "1", "1.0", "1e3", "0x1f",
    "0o17", "1_000", "1:20", ".inf", "-.inf", ".nan", "2001-12-14", "<<", "=", "- x", "-", "? x", "?", ": x",
    "a: b", "a:b", "a #b", "#x", "{x", "}", "[x", "]", "a, b", "&anchor", "*alias", "!tag", "!!str", "%YAML",
    "---", "...", "|", ">", "'q", '"dq', "\\", "\\n", " lead", "trail ", "\t", "line\nbreak", "cr\rx", "crlf\r\n",
    "ls\u2028x", "ps\u2029x", "nel\x85x", "nul\x00x", "bell\x07", "esc\x1b[31m", "del\x7f", "bom\ufeff",
    "nbsp\xa0", "é", "😀", "\U0010ffff", "\ufffe", "x" * 1100, "extends:\n  a.b:\n    replaces: {}",
]  # fmt: skip
TEXT = st.one_of(st.text(), st.sampled_from(HOSTILE))


def mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid nine times in ten: dumps of which something is written, with the odd field that cannot be."""
    return st.integers(0, 9).flatmap(lambda draw: hostile if draw == 0 else valid)


LOWER = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
NAME = mostly(st.one_of(LOWER, st.sampled_from([n for n in HOSTILE if re.fullmatch(r"[a-z][a-z0-9_]*", n)])), TEXT)
BACKEND = mostly(st.one_of(st.from_regex(BACKEND_PATTERN.strip("^$"), fullmatch=True), NAME), TEXT)
ARCHS = st.lists(mostly(st.sampled_from(["gfx942", "gfx950", "9.0", "sm_90a"]), TEXT), min_size=1, max_size=3)
CAPABILITY = st.fixed_dictionaries(
    {"device": mostly(st.sampled_from(["cuda", "hip", "cpu"]), NAME)}, optional={"archs": ARCHS}
)
TARGET = mostly(st.sampled_from(["pkg.mod:fn", "pkg.mod:Cls.method", "p:no", "No.on:null"]), TEXT)
SPEC = st.fixed_dictionaries(
    {
        "op": mostly(st.builds(lambda g, n: f"{g}.{n}", NAME, NAME), TEXT),
        "backend": BACKEND,
        "target": TARGET,
        "capabilities": st.lists(CAPABILITY, max_size=2),
    },
    optional={"auto": mostly(st.booleans(), TEXT), "priority": st.lists(BACKEND, max_size=3, unique=True)},
)
QUICK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reads_back(text: str) -> Any:
    """The data a written file holds, read by kcatalog's own loader (a diagnostic fails the test)."""
    parsed = parse_yaml("written.yaml", text)
    assert not isinstance(parsed, kcatalog.Diagnostic), (parsed, text)
    return parsed.data


def texts(value: Any) -> list[str]:
    """Every string in data: keys and values."""
    value = value.value if isinstance(value, Flow) else value
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*texts(key), *texts(item))]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in texts(item)]
    return [value] if isinstance(value, str) else []


def unflow(value: Any) -> Any:
    """Data as the emitter is given it, as it reads back: Flow is layout only, tuples are lists."""
    if isinstance(value, Flow):
        return unflow(value.value)
    if isinstance(value, dict):
        return {key: unflow(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [unflow(item) for item in value]
    return value


# -- the emitter ---------------------------------------------------------------------------------------------------

SCALAR = st.one_of(
    st.text(st.characters(exclude_categories=())),  # surrogates too: those are refused
    st.sampled_from(HOSTILE),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
DATA = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(TEXT, inner, max_size=3),
        st.builds(Flow, st.dictionaries(TEXT, inner, max_size=3)),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(TEXT, DATA, max_size=4),
    comments=st.lists(st.text(st.characters(exclude_categories=())), max_size=3),
)
@example(data={"x" * 2000: {"y" * 600: Flow({"z" * 700: 1})}}, comments=["a\nb: c"])
@example(data={"a": ["b", "\ud800"]}, comments=["\udcff"])
def test_any_data_reads_back_as_itself(data: dict[str, Any], comments: list[str]) -> None:
    try:
        text = document(data, comments=comments)
    except UnwritableValue:  # only for what no YAML file can hold: a lone surrogate
        assert any("\ud800" <= char <= "\udfff" for text in texts(data) for char in text)
        return
    assert reads_back(text) == unflow(data)
    lines = text.splitlines()
    assert lines[: len(comments)] == [comment(c) for c in comments]
    assert all(line.startswith("#") and "\n" not in line for line in lines[: len(comments)])


# -- import-registry: every field of a dump ------------------------------------------------------------------------


def run_import(dump: RegistryDump, out: Path) -> tuple[int, str, str]:
    """Exit code, what it printed, and the header comment each file it writes starts with (below the modeline)."""
    dump_path = out.parent / "dump.json"
    dump_path.write_text(dump.to_json(), encoding="utf-8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(["import-registry", "--from-json", str(dump_path), "--out", str(out)])
    source = dump.source or str(dump_path)  # a dump that names no source is named by its file
    return code, printed.getvalue(), comment(f"Imported by `kcatalog import-registry` from {source}.")


@QUICK
@given(source=TEXT, specs=st.lists(SPEC, min_size=1, max_size=4))
@example(
    source="r\nextends:\n  x.y: {}", specs=[{"op": "no.KDA", "backend": "no", "target": "a:b", "capabilities": []}]
)
@example(source="s", specs=[{"op": "g.op", "backend": "KDA", "target": "a:b", "capabilities": [], "priority": ["no"]}])
def test_import_registry_writes_every_field_as_given_or_refuses_it(source: str, specs: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        code, printed, header = run_import(RegistryDump(source, tuple(specs)), out)
        assert code in (0, 1), printed
        if not out.exists():  # refused whole: said why, wrote nothing
            assert code == 1 and "error:" in printed, printed
            return
        catalog, diagnostics = kcatalog.check_catalog(out, check_targets=False)
        assert catalog is not None, [str(d) for d in diagnostics]
        for path in out.iterdir():
            text = path.read_text(encoding="utf-8")
            assert text.splitlines()[1] == header  # the source's every character, on its one line
            reads_back(text)
        for index, given in enumerate(specs):
            if f"spec {index} " in printed:  # left out, and said so
                continue
            info = catalog.info(given["op"])
            written = info.backends[given["backend"]]
            assert str(written.target) == given["target"]
            assert [(c.device, c.archs) for c in written.capabilities] == [
                (c["device"], tuple(c["archs"]) if "archs" in c else None) for c in given["capabilities"]
            ]
            assert written.auto is (given.get("auto") is not False)
            if info.priority is not None:
                assert list(info.priority) in [s.get("priority") for s in specs if s["op"] == given["op"]]


# -- plan: every field it writes -----------------------------------------------------------------------------------

ROWS = st.lists(st.tuples(st.integers(1, 10**6), st.one_of(st.none(), st.integers(1, 10**6)), TEXT), max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    platform=TEXT,
    digest=TEXT,
    command=TEXT,
    choices=st.dictionaries(TEXT, st.dictionaries(TEXT, st.one_of(TEXT, ROWS.map(tuple)), max_size=2), max_size=3),
)
def test_a_plan_holds_any_text_in_every_field(
    platform: str, digest: str, command: str, choices: dict[str, dict[str, Any]]
) -> None:
    data = reads_back(plan_text(ResolvedPlan(platform, digest, choices, ()), command))
    body = data["plan"]
    assert (body["platform"], body["digest"], body["command"]) == (platform, digest, command)
    assert body["kcatalog"] == kcatalog.__version__
    assert body["ops"] == {
        op: {
            dtype: choice
            if isinstance(choice, str)
            else [{"tokens": [low, high], "backend": backend} for low, high, backend in choice]
            for dtype, choice in by.items()
        }
        for op, by in choices.items()
    }


def write_catalog(directory: Path, backends: list[str]) -> None:
    directory.mkdir()
    settings_file = {"kcatalog": 1, "backends": {name: {} for name in backends}, "priority": list(backends)}
    target = "kcatalog.kernels.torch.layernorm:rms_norm"
    op = {"dtypes": ["float32"], "backends": {name: {"target": target} for name in backends}}
    (directory / "kcatalog.yaml").write_text(yaml.safe_dump(settings_file), encoding="utf-8")
    (directory / "g.yaml").write_text(yaml.safe_dump({"kcatalog": 1, "group": "g", "ops": {"op": op}}), "utf-8")


FILE_NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=40).filter(
    lambda name: name not in (".", "..") and len(name.encode()) < 200
)


@QUICK
@given(backends=st.lists(BACKEND, min_size=1, max_size=3, unique=True), name=FILE_NAME)
@example(backends=["KDA", "no", "null"], name="plan\n  platform: hip\u2028.yaml")
def test_plan_writes_what_the_catalog_names_as_it_names_it(backends: list[str], name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory, plan = Path(tmp) / "catalog", Path(tmp) / name
        write_catalog(directory, backends)
        catalog, _ = kcatalog.check_catalog(directory)
        argv = ["plan", str(directory), "--platform", "cpu", "--out", str(plan)]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = main(argv)
        if catalog is None:  # not a catalog (a backend name it cannot have): refused, nothing written
            assert code == 1 and not plan.exists()
            return
        assert code == 0, printed.getvalue()
        body = reads_back(plan.read_text(encoding="utf-8"))["plan"]
        assert body["ops"] == {"g.op": {"float32": backends[0]}}
        assert body["command"] == shlex.join(["kcatalog", *argv])
        loaded = kcatalog.load_catalog(directory, cache=False, plan=plan)
        assert loaded.select("g.op", "cpu", "float32").decided_by == f"plan {plan}"


# -- every file kind, hostile strings in each of its fields -----------------------------------------------------------


def validated(name: str, text: str) -> Any:
    """The model of a written file, through the validate path kcatalog reads every file by."""
    found = Diagnostics()
    files = validate_sources([SourceFile(Path(name), name, text, name == "kcatalog.yaml")], found).files
    assert not found.has_errors, [str(d) for d in found]
    return files[0].model


NAMES = [name for name in HOSTILE if re.fullmatch(BACKEND_PATTERN, name) and len(name) < 100]  # backend names


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_tuned_table_holds_hostile_text(hostile: str) -> None:
    backend = NAMES[HOSTILE.index(hostile) % len(NAMES)]
    provenance = Provenance(hostile, "9.0", 132, hostile, hostile, None, {"mylib": hostile}, hostile, hostile, hostile)
    measured = [Measured("norm.rms_norm", "float32", 8, (hostile, "T=8"), {backend: 2.5, "torch": 3.0}, {})]
    table = validated("tuned.yaml", table_text("cuda:9.0", provenance, measured))
    assert isinstance(table, TunedTable)
    kept = table.tuned.provenance
    assert (kept.device, kept.driver, kept.torch, kept.kcatalog, kept.date, kept.command) == (hostile,) * 6
    assert (kept.sms, dict(kept.packages)) == (132, {"mylib": hostile})
    (bucket,) = table.tuned.ops["norm.rms_norm"]["float32"]
    assert (bucket.backend, dict(bucket.medians_us), bucket.shapes) == (
        backend,
        {backend: 2.5, "torch": 3.0},
        (hostile, "T=8"),
    )


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_plan_holds_hostile_text(hostile: str) -> None:
    backend = NAMES[HOSTILE.index(hostile) % len(NAMES)]
    choices = {"norm.rms_norm": {"float32": backend, "bfloat16": ((1, 8, backend), (9, None, "torch"))}}
    plan = validated("plan.yaml", plan_text(ResolvedPlan("cuda:9.0", "0123456789abcdef", choices, ()), hostile))
    assert isinstance(plan, Plan)
    assert plan.plan.command == hostile
    entries = plan.plan.ops["norm.rms_norm"]
    assert entries["float32"] == backend
    assert [(b.tokens, b.backend) for b in entries["bfloat16"]] == [((1, 8), backend), ((9, None), "torch")]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_imported_manifests_and_settings_hold_hostile_text(hostile: str, tmp_path: Path) -> None:
    backend = NAMES[HOSTILE.index(hostile) % len(NAMES)]
    specs = (
        {"op": "norm.rms_norm", "backend": backend, "target": "pkg.mod:fn", "priority": [backend, "torch"]},
        {"op": "norm.rms_norm", "backend": "torch", "target": "pkg.mod:fn2", "capabilities": [{"device": "hip", "archs": [hostile]}]},
        {"op": f"norm.{hostile}", "backend": hostile, "target": hostile},
    )  # fmt: skip
    out = tmp_path / "out"
    code, printed, header = run_import(RegistryDump(hostile, specs), out)
    catalog = kcatalog.load_catalog(out, cache=False, check_targets=False)
    info = catalog.info("norm.rms_norm")
    assert (list(info.backends), info.priority) == ([backend, "torch"][: len(info.backends)], (backend, "torch"))
    for path in out.iterdir():
        assert path.read_text(encoding="utf-8").splitlines()[1] == header
    written = {(spec.op, spec.backend) for spec in catalog.specs()}
    for index, spec in enumerate(specs):  # each spec written as given, or left out with a diagnostic naming it
        assert ((spec["op"], spec["backend"]) in written) != (f"spec {index} " in printed), printed
    assert code == (1 if "left out" in printed else 0)
