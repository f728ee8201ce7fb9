"""The functions of a Python engine's request layer: what its route handlers can reach, statically.

A list of whole files is a poor denominator for engine-side coverage: it counts code no request
reaches (sampling parameters, media parsing, other APIs) and leaves out code that decides tokens
in files nobody listed. This module derives the set instead: seeded from the functions an entry
point runs (route handlers, the request model's validators), it closes over their callees inside
the engine's own package, stopping at the named calls that lie past the template (the "sinks"
and "stops" of `Layer`).

The call graph is read from the source with `ast` alone, never imported. A call resolves by what
its name is bound to in the module (a function, a class, an imported module or name), by the
class for `self.m()` / `cls.m()` / `super().m()` (the method in the class and its bases, and its
overrides in subclasses: dynamic dispatch), and for any other receiver `x.m()` by every method of
the package named `m`, unless the name is too common to say anything (`COMMON`) or more than
`MAX_DISPATCH` classes define it. A function referenced without a call (a callback, a
`functools.partial`) counts as called; a nested function or lambda is reached with its parent.
Instantiating a class, or naming it as a handler's parameter type (how FastAPI builds a request
model), reaches its `__init__`, its `__post_init__`/`model_post_init` and every pydantic
validator of the class and its bases, and of the classes its fields are annotated with. So the
set over-approximates what a type checker would allow (it counts a method every same-named
receiver could call), which makes the coverage figure conservative, not flattering.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import GoldensError

VALIDATORS = {"field_validator", "model_validator", "validator", "root_validator", "field_serializer",
              "model_serializer"}
LIFECYCLE = ("__init__", "__post_init__", "model_post_init", "__new__")
# method names every container, string or stream has: a receiver we cannot type calling one of
# these says nothing about which package method it reaches
COMMON = frozenset("""
get items keys values append extend pop update copy setdefault clear remove insert index count
sort join split strip lstrip rstrip startswith endswith replace format lower upper encode decode
read write close open add discard difference union intersection issubset to_dict dict json
model_dump model_dump_json model_copy model_validate __enter__ __exit__ __call__ __repr__ __str__
__eq__ __hash__ __len__ __iter__ __contains__ __getitem__ __setitem__ run start stop send wait
result cancel done info debug warning error exception warning_once info_once debug_once
""".split())
MAX_DISPATCH = 6


@dataclass
class Function:
    """One function or method of the package: where it is and what it refers to."""

    key: str  # "vllm/renderers/hf.py:HfRenderer.render_messages"
    path: str  # shown path, relative to the site root
    qualname: str
    module: str
    cls: str | None  # its class's key ("module:Class"), for methods
    first: int  # the first line of its body
    last: int
    node: ast.AST = field(repr=False, compare=False)
    validator: bool = False
    abstract: bool = False  # an @abstractmethod or a body of `...`/`pass`/raise NotImplementedError: never runs


@dataclass
class ClassInfo:
    key: str  # "module:Class"
    module: str
    name: str
    bases: list[ast.expr]
    methods: dict[str, str] = field(default_factory=dict)  # method name -> function key
    fields: list[ast.expr] = field(default_factory=list)  # annotations of its class-level fields
    resolved_bases: list[str] = field(default_factory=list)


@dataclass
class Index:
    """Every function and class of the package's modules, and each module's bindings."""

    functions: dict[str, Function] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    bindings: dict[str, dict[str, str]] = field(default_factory=dict)  # module -> name -> "module" / "module:attr"
    by_method: dict[str, list[str]] = field(default_factory=dict)  # method name -> function keys
    subclasses: dict[str, set[str]] = field(default_factory=dict)
    nested: dict[str, list[str]] = field(default_factory=dict)  # function key -> its nested functions
    modules: set[str] = field(default_factory=set)
    aliases: dict[str, tuple[str, ast.expr]] = field(default_factory=dict)  # "module:Name" -> (module, value)
    dead: set[str] = field(default_factory=set)  # methods every configured instance overrides (reached by super() only)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve_from(module: str, is_package: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *([name] if name else [])])


def index(root: Path, packages: Sequence[str]) -> Index:
    """Parse every module of `packages` under `root` (a site-packages or source tree)."""
    out = Index()
    for package in packages:
        base = root / package
        paths = sorted(base.rglob("*.py")) if base.is_dir() else [base]
        for path in paths:
            if not path.is_file():
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            _index_module(out, root, path, tree)
    for info in out.classes.values():
        info.resolved_bases = [b for b in (_class_of(out, info.module, base) for base in info.bases) if b]
        for base in info.resolved_bases:
            out.subclasses.setdefault(base, set()).add(info.key)
    return out


def _index_module(out: Index, root: Path, path: Path, tree: ast.Module) -> None:
    module = _module_name(root, path)
    shown = path.relative_to(root).as_posix()
    out.modules.add(module)
    bindings = out.bindings.setdefault(module, {})
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bindings[alias.asname] = alias.name
                else:
                    bindings[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, is_package, node.level, node.module)
            for alias in node.names:
                bindings[alias.asname or alias.name] = f"{source}:{alias.name}"

    for statement in tree.body:  # module-level type aliases (`ChatMessage = Annotated[Union[...], ...]`)
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
            name, value = statement.targets[0].id, statement.value
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            name, value = statement.target.id, statement.value
        else:
            continue
        if isinstance(value, (ast.Subscript, ast.BinOp, ast.Name, ast.Attribute)):
            out.aliases[f"{module}:{name}"] = (module, value)
            bindings.setdefault(name, f"{module}:{name}")

    def visit(node: ast.AST, prefix: str, cls: str | None, parent: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{prefix}{child.name}"
                key = f"{shown}:{qualname}"
                decorators = {_last_name(d) for d in child.decorator_list}
                body = child.body
                out.functions[key] = Function(key, shown, qualname, module, cls, body[0].lineno,
                                              body[-1].end_lineno or body[-1].lineno, child,
                                              validator=bool(decorators & VALIDATORS),
                                              abstract="abstractmethod" in decorators or _stub(body))
                if cls is not None and parent is None:
                    out.classes[cls].methods[child.name] = key
                    out.by_method.setdefault(child.name, []).append(key)
                elif parent is None and cls is None:
                    bindings.setdefault(child.name, f"{module}:{child.name}")
                if parent is not None:
                    out.nested.setdefault(parent, []).append(key)
                visit(child, qualname + ".", None, key)
            elif isinstance(child, ast.Lambda) and parent is not None:
                continue  # a lambda's body is its parent's: its calls are read with the parent's
            elif isinstance(child, ast.ClassDef) and parent is None:
                ckey = f"{module}:{prefix}{child.name}"
                info = ClassInfo(ckey, module, f"{prefix}{child.name}", list(child.bases))
                info.fields = [s.annotation for s in child.body if isinstance(s, ast.AnnAssign)]
                out.classes[ckey] = info
                if cls is None:
                    bindings.setdefault(child.name, ckey)
                visit(child, f"{prefix}{child.name}.", ckey, None)
            else:
                visit(child, prefix, cls, parent)

    visit(tree, "", None, None)


def _stub(body: list[ast.stmt]) -> bool:
    rest = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not rest:
        return True
    if len(rest) != 1:
        return False
    only = rest[0]
    if isinstance(only, ast.Pass):
        return True
    if isinstance(only, ast.Raise) and only.exc is not None:
        return _last_name(only.exc) == "NotImplementedError"
    return False


def _last_name(node: ast.expr) -> str:
    while isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _dotted(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _target(out: Index, module: str, name: str, depth: int = 0) -> str | None:
    """What `name` in `module` is bound to: "module:attr" of a function or class, or a module."""
    bound = out.bindings.get(module, {}).get(name)
    if bound is None or depth > 8:
        return None
    if ":" not in bound:
        return bound if bound in out.modules else None
    where, attr = bound.split(":", 1)
    if f"{where}.{attr}" in out.modules:
        return f"{where}.{attr}"
    if bound in out.classes or bound in out.aliases or _function_key(out, where, attr):
        return bound
    if where in out.modules and where != module:
        return _target(out, where, attr, depth + 1)  # re-exported
    return None


def _function_key(out: Index, module: str, name: str) -> str | None:
    for fn in _module_functions(out, module):
        if fn.qualname == name:
            return fn.key
    return None


_MODULE_FUNCTIONS: dict[int, dict[str, list[Function]]] = {}


def _module_functions(out: Index, module: str) -> list[Function]:
    table = _MODULE_FUNCTIONS.get(id(out))
    if table is None:
        table = {}
        for fn in out.functions.values():
            if fn.cls is None and "." not in fn.qualname:
                table.setdefault(fn.module, []).append(fn)
        _MODULE_FUNCTIONS[id(out)] = table
    return table.get(module, [])


def _class_of(out: Index, module: str, expr: ast.expr) -> str | None:
    parts = _dotted(expr.value if isinstance(expr, ast.Subscript) else expr)
    if not parts:
        return None
    bound = _target(out, module, parts[0])
    for part in parts[1:]:
        if bound in out.modules:
            bound = _target(out, bound, part)
        else:
            return None
    return bound if bound in out.classes else None


def mro(out: Index, cls: str) -> list[str]:
    seen, order, queue = set(), [], [cls]
    while queue:
        current = queue.pop(0)
        if current in seen or current not in out.classes:
            continue
        seen.add(current)
        order.append(current)
        queue.extend(out.classes[current].resolved_bases)
    return order


def _descendants(out: Index, cls: str) -> list[str]:
    seen, queue = set(), [cls]
    while queue:
        for sub in out.subclasses.get(queue.pop(), ()):
            if sub not in seen:
                seen.add(sub)
                queue.append(sub)
    return sorted(seen)


def method_targets(out: Index, cls: str, name: str, dispatch: bool = True) -> list[str]:
    """`name` on `cls`: the first definition along its bases, and (dispatch) every override in
    its subclasses."""
    found = []
    for klass in mro(out, cls):
        if name in out.classes[klass].methods:
            found.append(out.classes[klass].methods[name])
            break
    if dispatch:
        found += [out.classes[sub].methods[name] for sub in _descendants(out, cls) if name in out.classes[sub].methods]
    return found


def instantiated(out: Index, cls: str, seen: set[str] | None = None) -> list[str]:
    """What making (or validating into) an instance of `cls` runs: its lifecycle methods, its
    validators along its bases, and the same for the package classes its fields name."""
    seen = set() if seen is None else seen
    if cls in seen or cls not in out.classes:
        return []
    seen.add(cls)
    found = []
    for klass in mro(out, cls):
        info = out.classes[klass]
        for name, key in info.methods.items():
            if name in LIFECYCLE or out.functions[key].validator:
                found.append(key)
        for annotation in info.fields:
            found += _annotated(out, info.module, annotation, seen)
    return found


def _annotated(out: Index, module: str, annotation: ast.expr, seen: set[str]) -> list[str]:
    """What validating a value into `annotation` runs: every package class it names, through
    module-level aliases."""
    found = []
    for node in ast.walk(annotation):
        if isinstance(node, (ast.Name, ast.Attribute)):
            inner = _class_of(out, module, node)
            if inner:
                found += instantiated(out, inner, seen)
                continue
            parts = _dotted(node)
            alias = _target(out, module, parts[0]) if parts and len(parts) == 1 else None
            if alias in out.aliases and alias not in seen:
                seen.add(alias)
                found += _annotated(out, *out.aliases[alias], seen)
    return found


def _names_in(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a function's body, not descending into nested functions or classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from (d for d in child.decorator_list)
            continue
        yield child
        yield from _names_in(child)


def callees(out: Index, fn: Function) -> set[str]:
    """The package functions `fn` may call or hand on."""
    found: set[str] = set(out.nested.get(fn.key, ()))
    module = fn.module
    body = fn.node.body if hasattr(fn.node, "body") else []
    args = getattr(fn.node, "args", None)
    nodes = [n for stmt in body for n in (stmt, *_names_in(stmt))]
    if args is not None:  # a parameter typed with a request model: FastAPI builds it
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.annotation is not None:
                if fn.cls is None:
                    found |= set(_annotated(out, module, arg.annotation, set()))
    for node in nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            target = _target(out, module, node.id)
            if target in out.classes:
                found |= set(instantiated(out, target))
            elif target and ":" in target:
                where, attr = target.split(":", 1)
                key = _function_key(out, where, attr)
                if key:
                    found.add(key)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            found |= _attribute(out, fn, node)
    return found - {fn.key}


def _attribute(out: Index, fn: Function, node: ast.Attribute) -> set[str]:
    name, value = node.attr, node.value
    if isinstance(value, ast.Name) and value.id in ("self", "cls") and fn.cls:
        return set(method_targets(out, fn.cls, name)) - out.dead
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super" and fn.cls:
        bases = out.classes[fn.cls].resolved_bases
        return {t for base in bases for t in method_targets(out, base, name, dispatch=False)}
    parts = _dotted(value)
    if parts:
        bound = _target(out, fn.module, parts[0])
        for part in parts[1:]:
            bound = _target(out, bound, part) if bound in out.modules else None
        if bound in out.modules:
            target = _target(out, bound, name)
            if target in out.classes:
                return set(instantiated(out, target))
            if target and ":" in target:
                key = _function_key(out, *target.split(":", 1))
                return {key} if key else set()
            return set()
        if bound in out.classes:
            return set(method_targets(out, bound, name)) - out.dead
    if name in COMMON or name.startswith("__"):
        return set()
    candidates = out.by_method.get(name, [])
    classes = {out.functions[key].cls for key in candidates}
    return set(candidates) - out.dead if len(classes) <= MAX_DISPATCH else set()


def closure(out: Index, seeds: Iterable[str], stops: Iterable[str] = ()) -> set[str]:
    """Every function reachable from `seeds` (function keys), never entering a `stops` key
    (the calls past the template: what takes the rendered prompt onward)."""
    stopped = set(stops)
    reached: set[str] = set()
    queue = [s for s in seeds if s not in stopped]
    for seed in queue:
        if seed not in out.functions:
            raise GoldensError(f"request-layer reach: no function {seed}")
    while queue:
        key = queue.pop()
        if key in reached:
            continue
        reached.add(key)
        if out.functions[key].abstract:
            continue
        queue.extend(c for c in callees(out, out.functions[key]) if c not in reached and c not in stopped)
    return reached


def resolve_names(out: Index, names: Iterable[str]) -> list[str]:
    """Function keys from "path.py:Qual.name" (as is) or "path.py:*" (every function of a file)."""
    keys = []
    for name in names:
        if name.endswith(":*"):
            found = sorted(k for k, f in out.functions.items() if f.path == name[:-2])
            if not found:
                raise GoldensError(f"request-layer reach: no functions in {name[:-2]}")
            keys += found
        elif name in out.functions:
            keys.append(name)
        else:
            raise GoldensError(f"request-layer reach: no function {name}")
    return keys


@dataclass(frozen=True)
class Spec:
    """Where an engine's request layer starts and stops (docs/engine-coverage.md lists each).

    `packages`: the subtrees of the engine's own package the closure may enter (paths under the
    root); `seeds`: the entry points' functions ("path.py:Qual.name"); `models`: the request
    models the entry points build from a body ("dotted.module:Class": their validators run);
    `stops`: calls past the template that the closure does not enter (what takes the rendered
    prompt onward), "path.py:*" for a whole file; `absent`: files ("path.py") or classes
    ("path.py:Class") of code the matrix's configuration never selects (another tokenizer mode's
    renderer, another tokenizer version's encoder), out of the set; `instances`: the concrete
    classes the matrix's configuration makes of a hierarchy (Mistral NeMo's v3 instruct encoder):
    a method every one of them overrides never runs, so it is out of the set."""

    packages: tuple[str, ...]
    seeds: tuple[str, ...]
    models: tuple[str, ...] = ()
    stops: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    instances: tuple[str, ...] = ()  # "dotted.module:Class" the configuration makes (resolves dispatch)


def shadowed(out: Index, instances: Sequence[str]) -> set[str]:
    """The methods no instance of `instances` runs: defined in one of their bases, and overridden
    before it along the MRO of every instance class that has that base."""
    if not instances:
        return set()
    for name in instances:
        if name not in out.classes:
            raise GoldensError(f"request-layer reach: no class {name}")
    live: set[str] = set()
    bases: set[str] = set()
    for name in instances:
        order = mro(out, name)
        bases |= set(order)
        first: dict[str, str] = {}
        for klass in order:
            for method, key in out.classes[klass].methods.items():
                first.setdefault(method, key)
        live |= set(first.values())
    return {key for klass in bases for key in out.classes[klass].methods.values() if key not in live}
    # (a super() call still reaches them: callees() resolves super() without this set)


def functions(root: Path, spec: Spec) -> dict[str, set[str]]:
    """The request layer's reachable functions under `root`: shown path -> qualified names."""
    out_index = index(root, spec.packages)
    seeds = resolve_names(out_index, spec.seeds)
    for model in spec.models:
        if model not in out_index.classes:
            raise GoldensError(f"request-layer reach: no class {model}")
        seeds += instantiated(out_index, model)
    stopped = set(resolve_names(out_index, spec.stops))
    stopped |= {key for key, fn in out_index.functions.items()
                if fn.path in spec.absent or any(key == a or key.startswith(f"{a}.") for a in spec.absent if ":" in a)}
    out_index.dead = shadowed(out_index, spec.instances)
    found: dict[str, set[str]] = {}
    for key in closure(out_index, seeds, stopped):
        fn = out_index.functions[key]
        if fn.abstract:
            continue  # a stub never runs: a call to it runs an override, which the closure holds
        found.setdefault(fn.path, set()).add(fn.qualname)
    return found
