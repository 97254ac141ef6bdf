"""The layout, checked: imports go down only (seckill_site -> reconciliation ->
orders -> inventory -> accounts -> core) and no module imports itself back
through others. Function-level imports count too: they are how cycles hide.

The project package sits above every app: it wires them together (URLs, the
Celery app, beat, the WSGI entry point) and no app imports it; a hook an app
needs from it is installed by the project, or moved into the app that owns it.
And an app writes only its own tables: a use case that spans apps calls the
other app's services."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"core": 0, "accounts": 1, "inventory": 2, "orders": 3, "reconciliation": 4, "seckill_site": 5}
APPS = {name for name in LAYERS if name != "seckill_site"}
SKIP_PARTS = {"tests", "migrations"}


def _modules() -> dict[str, Path]:
    out = {}
    for app in LAYERS:
        for path in (ROOT / app).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            if SKIP_PARTS & set(rel.parts):
                continue
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules a module imports, wherever in the file the import is."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            # the longest known module the name starts with
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                candidate = ".".join(parts[:i])
                if candidate in known:
                    if candidate != name:
                        found.add(candidate)
                    break
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_imports_go_down_only():
    upward = []
    for module, targets in _graph().items():
        here = LAYERS[module.split(".")[0]]
        for target in targets:
            there = LAYERS[target.split(".")[0]]
            if there > here:
                upward.append(f"{module} -> {target}")
    assert not upward, "upward imports:\n  " + "\n  ".join(sorted(upward))


def test_no_module_imports_itself_back():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in cycles)


def test_no_app_imports_the_project_package():
    """Also held by the layers above; named here so a failure says what it is."""
    upward = sorted(f"{module} -> {target}" for module, targets in _graph().items()
                    if module.split(".")[0] in APPS for target in targets if target.split(".")[0] == "seckill_site")
    assert not upward, "apps importing the project package:\n  " + "\n  ".join(upward)


def test_the_project_package_imports_apps_only_where_django_is_set_up():
    """Most of the project package loads before Django's apps are ready (the
    Celery app with the settings, the web server's main process, the
    adapters), so only modules that run once Django is set up import apps: the
    URLconf, and beat's scheduler (it writes inventory's records of the sweeps
    it holds). The WSGI entry point wraps every request in core's bounded
    backlog and lent MySQL connection, which need no app ready; the adapters
    check their versions with core.adapters, which needs nothing of Django."""
    allowed = {"urls.py", "beat.py"}
    core_allowed = {"wsgi.py"}
    offenders = []
    for path in (ROOT / "seckill_site").rglob("*.py"):
        if path.name in allowed or "settings" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in APPS and n != "core.adapters"
                          and not (path.name in core_allowed and n.split(".")[0] == "core")]
    assert not offenders, offenders


WRITES = {"create", "bulk_create", "bulk_update", "update", "delete", "get_or_create", "update_or_create", "save"}


def test_an_app_writes_only_its_own_tables():
    """A model another app owns is written through that app's services, never
    by its manager or its querysets from here (a read is fine). Found by name:
    a model imported from another app's models, at the root of a call chain
    that ends in a write."""
    offenders = []
    for name, path in _modules().items():
        app = name.split(".")[0]
        if app not in APPS:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        foreign = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").endswith(".models") and (node.module or "").split(".")[0] in APPS - {app}
                   for a in node.names}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES):
                continue
            root = node.func.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in foreign:
                offenders.append(f"{name}:{node.lineno}: {root.id}...{node.func.attr}()")
    assert not offenders, "writes to another app's tables:\n  " + "\n  ".join(offenders)
