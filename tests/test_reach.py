"""The request layer as a reachable set (generator/measure/reach.py): a call graph read from the
source, closed from the entry points, stopped where the spec says, dispatch resolved by the
classes the configuration makes. Each test parses a small package written here: real source,
the same parser the engines' sets come from."""

from __future__ import annotations

import textwrap

from generator.measure import engine, reach

PACKAGE = {
    "pkg/__init__.py": "",
    "pkg/models.py": '''
        from pydantic import BaseModel, field_validator

        class Part(BaseModel):
            text: str

            @field_validator("text")
            def no_tabs(cls, value):
                return value.replace("\\t", " ")

        Content = list[Part] | str

        class Request(BaseModel):
            content: Content

            @field_validator("content")
            def check(cls, value):
                return value
    ''',
    "pkg/render.py": '''
        from pkg import helpers
        from pkg.models import Request

        class Base:
            def render(self, request):
                return self.encode(self.old(helpers.join(request)))

            def encode(self, text):
                raise NotImplementedError

            def old(self, text):
                return text

        class V1(Base):
            def encode(self, text):
                return self.old(text)

            def old(self, text):
                return text.upper()

        class V2(V1):
            def encode(self, text):
                return super().encode(text) + "!"

        def handler(request: Request):
            return V2().render(request) + after(request)

        def after(request):
            return sampling(request)

        def sampling(request):
            return 1

        def unused():
            return 0
    ''',
    "pkg/helpers.py": '''
        def join(request):
            return "".join(part(p) for p in request.content)

        def part(p):
            inner = lambda: p.text
            return inner()
    ''',
}


def write(root):
    for name, text in PACKAGE.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_closure_follows_calls_validators_and_dispatch_and_stops_where_told(tmp_path):
    write(tmp_path)
    spec = reach.Spec(packages=("pkg",), seeds=("pkg/render.py:handler",), stops=("pkg/render.py:sampling",))
    found = reach.functions(tmp_path, spec)
    assert found["pkg/render.py"] == {"handler", "after", "Base.render", "V1.encode", "V2.encode", "V1.old",
                                      "Base.old"}
    assert found["pkg/helpers.py"] == {"join", "part"}
    # the handler's parameter type is built from the body: its validators and its fields' run
    assert found["pkg/models.py"] == {"Request.check", "Part.no_tabs"}
    # an abstract stub never runs; nothing calls `unused`; `sampling` lies past the stop
    assert "Base.encode" not in found["pkg/render.py"] and "unused" not in found["pkg/render.py"]


def test_instances_drop_the_methods_every_configured_class_overrides(tmp_path):
    write(tmp_path)
    spec = reach.Spec(packages=("pkg",), seeds=("pkg/render.py:handler",), instances=("pkg.render:V2",))
    found = reach.functions(tmp_path, spec)["pkg/render.py"]
    assert "Base.old" not in found  # V2's MRO reaches V1.old first
    assert {"V1.encode", "V2.encode", "V1.old"} <= found  # V1.encode through super()


def test_absent_files_and_classes_leave_the_set(tmp_path):
    write(tmp_path)
    spec = reach.Spec(packages=("pkg",), seeds=("pkg/render.py:handler",),
                      absent=("pkg/helpers.py", "pkg/render.py:V1"))
    found = reach.functions(tmp_path, spec)
    assert "pkg/helpers.py" not in found
    assert not {q for q in found["pkg/render.py"] if q.startswith("V1.")}


def test_a_function_counts_once_a_request_runs_one_of_its_lines(tmp_path):
    write(tmp_path)
    spec = reach.Spec(packages=("pkg",), seeds=("pkg/render.py:handler",), stops=("pkg/render.py:sampling",))
    paths, code = engine.reachable_files(tmp_path, spec)
    lines = {name: line for line, name in code["pkg/helpers.py"].functions.items()}
    coverage = engine.EngineCoverage("e", "1", code, hits={("pkg/helpers.py", lines["join"])},
                                     setup={("pkg/helpers.py", lines["part"])})
    status = coverage.function_status()
    assert status["pkg/helpers.py:join"] == "executed"
    assert status["pkg/helpers.py:part"] == "setup-only"
    assert status["pkg/render.py:handler"] == "never"
    executed, counted = coverage.functions_counted
    assert (executed, counted) == (1, len(status) - 1)
