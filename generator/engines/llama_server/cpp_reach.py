"""The functions of a C++ request layer its route handlers reach: a call graph read from the
source text of the functions gcov lists (llama_server.py).

gcov names every function of an instrumented file with its first and last line, lambdas
included. A function calls the functions whose name appears in its own lines as a call (`name(`,
`name<...>(`, after `.`, `->` or `Class::`), resolved by the last component of the callee's
name; a qualified call (`json::parse(`) resolves only to a function of that class or namespace
in the layer, and a name too common to say anything (a container's or nlohmann::json's method,
`COMMON`) only when qualified. A lambda lies inside the function that defines it and is reached
with it. Seeds are the route handlers (the lambdas assigned to `this->post_...`), and the
closure stops at `stops` (what lies past the template: inference). Like reach.py for Python,
the set over-approximates (a call reaches every same-named function), so the figure is
conservative.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMMON = frozenset("""
at get set find count contains size empty push_back emplace_back emplace insert erase clear begin end
front back data c_str str substr append reserve resize dump parse is_null is_string is_array is_object
is_number is_boolean items value type key first second swap make_pair to_string stoi stod min max
move forward make_shared make_unique reset release lock unlock wait notify_one notify_all what
operator format printf snprintf join split starts_with ends_with replace trim length compare assign
""".split())


@dataclass(frozen=True)
class Function:
    source: str  # relative path in the tree
    name: str  # gcov's demangled name without parameters ("server_routes::init_routes()::{lambda#3}::operator()")
    first: int
    last: int

    @property
    def key(self) -> str:
        return f"{self.source}:{self.name}"

    @property
    def base(self) -> str:
        """The last component of the name, without template arguments: how a call spells it."""
        return self.name.replace(TEMPLATE, "").rsplit("::", 1)[-1]

    @property
    def scope(self) -> str:
        """The class or namespace the function is declared in ("" at file scope)."""
        name = self.name.replace(TEMPLATE, "")
        return name.rsplit("::", 1)[0].rsplit("::", 1)[-1] if "::" in name else ""

    @property
    def lambda_(self) -> bool:
        return "{lambda" in self.name


TEMPLATE = "__T__"  # what a template argument list becomes in a cleaned name


def clean_name(demangled: str) -> str:
    """gcov's demangled name without ABI tags, template arguments (`__T__`: they may
    hold parentheses, `std::function<json ()>`) and parameter lists; lambdas as `{lambda#N}`."""
    name = re.sub(r"\[abi:[^\]]*\]", "", demangled)
    previous = None
    while previous != name:  # template arguments, innermost first
        previous = name
        name = re.sub(r"<[^<>]*>", TEMPLATE, name.replace("operator<<", "operator_shl"))
    name = re.sub(r"\{lambda\((?:[^(){}]|\([^()]*\))*\)#(\d+)\}", r"{lambda#\1}", name)
    previous = None
    while previous != name:  # parameter lists, innermost first
        previous = name
        name = re.sub(r"\((?:[^()]*)\)", "()", name)
    name = re.sub(r"\(\)( const)?( &&?)?$", "", name)
    return name.replace("()::", "::").rsplit(" ", 1)[-1]  # a template's return type goes before its name


CALL = re.compile(r"(?:([A-Za-z_]\w*)\s*::\s*)?(?:\.|->)?\s*([A-Za-z_~]\w*)\s*(?:<[^;{}()]*?>)?\s*\(")


def calls(text: str) -> set[tuple[str, str]]:
    """(qualifier, name) of every call-looking spelling in `text` (comments and strings dropped)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return {(match.group(1) or "", match.group(2)) for match in CALL.finditer(text)}


def graph(functions: Sequence[Function], sources: dict[str, list[str]]) -> dict[str, set[str]]:
    """Each function's callees among `functions` (keys)."""
    by_base: dict[str, list[Function]] = {}
    for fn in functions:
        by_base.setdefault(fn.base, []).append(fn)
    scopes = {fn.scope for fn in functions if fn.scope}
    edges: dict[str, set[str]] = {}
    for fn in functions:
        lines = sources[fn.source][fn.first - 1:fn.last]
        own = []
        nested = [other for other in functions if other.source == fn.source and other is not fn
                  and fn.first <= other.first and other.last <= fn.last]
        skip = {n for other in nested if other.lambda_ for n in range(other.first, other.last + 1)}
        for number, line in enumerate(lines, fn.first):
            if number not in skip or number == fn.first:
                own.append(line)
        found: set[str] = {other.key for other in nested if other.lambda_}
        for qualifier, name in calls("\n".join(own)):
            if qualifier and qualifier not in scopes:
                continue
            if name in COMMON and not qualifier:
                continue
            for target in by_base.get(name, ()):
                if not qualifier or target.scope == qualifier:
                    found.add(target.key)
        edges[fn.key] = found - {fn.key}
    return edges


def seeds(functions: Sequence[Function], sources: dict[str, list[str]], marks: Iterable[tuple[str, str]]) -> list[str]:
    """The lambda each mark's line assigns (the route handlers): the lambda starting on that line."""
    out = []
    for source, mark in marks:
        lines = [n for n, row in enumerate(sources[source], 1) if mark in row]
        found = [fn for fn in functions if fn.source == source and fn.lambda_ and fn.first in lines]
        if not found:
            raise ValueError(f"{source}: no handler lambda on the line of {mark!r}")
        out += [fn.key for fn in found]
    return out


def reachable(functions: Sequence[Function], sources: dict[str, list[str]], marks: Iterable[tuple[str, str]],
              stops: Iterable[str] = ()) -> set[str]:
    edges = graph(functions, sources)
    stopped = {fn.key for fn in functions if fn.name in set(stops)}
    found: set[str] = set()
    queue = [key for key in seeds(functions, sources, marks) if key not in stopped]
    while queue:
        key = queue.pop()
        if key in found:
            continue
        found.add(key)
        queue.extend(k for k in edges.get(key, ()) if k not in found and k not in stopped)
    return found
