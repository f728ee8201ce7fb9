"""One folder per engine (#43, build item 2): everything the registry names for a built-in
engine (its factory, version line, server, which-models rules, coverage layer) lives in that
engine's folder under generator/engines/, and the registry is the only list of engines: the
coverage layers `goldens coverage --engine` measures are the ones the registry declares."""

from __future__ import annotations

from conftest import ROOT

from generator.config import engine_registry
from generator.coverage import engine_layers
from generator.measure.engine import Layer

ENGINES = ROOT / "generator" / "engines"


def _references(info: engine_registry.EngineInfo) -> list[str]:
    """The "module:attribute" strings a built-in entry names."""
    found = [info.factory, info.applies, info.parse_applies, info.coverage]
    if info.versions is not None:
        found.append(info.versions.line)
    if info.server is not None:
        found.append(info.server.make)
    return [ref for ref in found if isinstance(ref, str)]


def test_each_built_in_engine_names_code_of_one_folder_only():
    folders = set()
    for info in engine_registry.BUILT_IN:
        modules = {ref.partition(":")[0] for ref in _references(info)}
        packages = {".".join(module.split(".")[:3]) for module in modules}
        assert len(packages) == 1, (info.name, sorted(modules))
        package = packages.pop()
        assert package.startswith("generator.engines."), (info.name, package)
        folder = ENGINES / package.rsplit(".", 1)[1]
        assert (folder / "__init__.py").is_file() and (folder / "engine.py").is_file(), folder
        for module in modules:
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module
        folders.add(folder.name)
    # every engine folder is some entry's: no engine code without its registration
    on_disk = {path.parent.name for path in ENGINES.glob("*/engine.py")}
    assert on_disk == folders


def test_the_measured_engines_are_the_registrys_and_each_layer_loads():
    declared = {info.name: info.coverage for info in engine_registry.BUILT_IN if info.coverage is not None}
    assert declared  # vLLM, mistral-common, minijinja and llama-server today
    for name, reference in declared.items():
        layer = engine_layers.layer(name)
        assert isinstance(layer, Layer) and layer.summary, name
        assert layer is engine_registry.load(reference)
    with_module = {path.parent.name for path in ENGINES.glob("*/coverage.py")}
    assert with_module == {ref.split(".")[2] for ref in declared.values()}
    assert engine_registry.measured() == list(declared)
