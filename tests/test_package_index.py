"""The package index as pip is configured, without pip: read from pip's files and PIP_*/UV_*
variables, used by the registry and passed to uv, which reads no pip.conf.

The venv test is real: uv (or pip, with GOLDENS_UV="") installs a wheel that only a find-links
directory named in a pip.conf holds, into a venv checked by importing it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from generator.errors import GoldensError
from generator.servers import venv
from generator.sources import registry

VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_CERT",
             "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_FIND_LINKS")


@pytest.fixture
def configured(tmp_path, monkeypatch):
    """Only the pip.conf this test writes (PIP_CONFIG_FILE; XDG and home pointed at nothing)."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    conf = tmp_path / "pip.conf"
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    registry.index_config.cache_clear()
    yield conf
    registry.index_config.cache_clear()


def test_pip_conf_and_variables_make_the_index(configured, monkeypatch):
    configured.write_text("[global]\nindex-url = https://mirror.example/simple/\n"
                          "extra-index-url = https://a.example/simple\n  https://b.example/simple\n"
                          "find-links = /srv/wheels\n[install]\nconstraint = /srv/c.txt\n")
    config = registry.index_config()
    assert registry.simple_index() == "https://mirror.example/simple"
    assert config.extra_index_urls == ("https://a.example/simple", "https://b.example/simple")
    assert config.find_links == ("/srv/wheels",) and config.constraints == ("/srv/c.txt",)
    assert config.uv_args() == [
        "--index-url", "https://mirror.example/simple", "--index-strategy", "unsafe-best-match",
        "--extra-index-url", "https://a.example/simple", "--extra-index-url", "https://b.example/simple",
        "--find-links", "/srv/wheels", "--constraint", "/srv/c.txt"]
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip-env.example/simple")
    registry.index_config.cache_clear()
    assert registry.simple_index() == "https://pip-env.example/simple"  # a variable beats the file
    monkeypatch.setenv("UV_INDEX_URL", "https://uv-env.example/simple")
    monkeypatch.setenv("UV_FIND_LINKS", "/srv/more")
    registry.index_config.cache_clear()
    assert registry.simple_index() == "https://uv-env.example/simple"
    assert registry.index_config().find_links == ("/srv/wheels", "/srv/more")


def test_nothing_configured_is_pypi(configured):
    assert registry.simple_index() == "https://pypi.org/simple"
    assert registry.index_config().extra_index_urls == ()


def _wheel(into: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel holding module `name` with V = version."""
    files = {f"{name}.py": f"V = {version!r}\n".encode(),
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    files[f"{name}-{version}.dist-info/RECORD"] = record.encode()
    path = into / f"{name}-{version}-py3-none-any.whl"
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def _probe_in_find_links(configured: Path, tmp_path: Path, monkeypatch) -> None:
    """goldens_probe 1.0 only in a find-links directory pip.conf names, beside an empty local
    index; the venvs go to a fresh GOLDENS_CACHE."""
    _wheel(tmp_path / "wheels", "goldens_probe", "1.0")
    (tmp_path / "index").mkdir()
    configured.write_text(f"[global]\nindex-url = {(tmp_path / 'index').as_uri()}\nfind-links = {tmp_path / 'wheels'}\n")
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))


@pytest.mark.integration
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_venv_installs_from_the_find_links_pip_conf_names(configured, tmp_path, monkeypatch, installer):
    """The wheel is only in the find-links directory, the index is an empty local one: the venv
    works only if the installer was given pip.conf's configuration."""
    _probe_in_find_links(configured, tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as many CI images have it
    if installer == "pip":
        monkeypatch.setenv("GOLDENS_UV", "")
    else:
        monkeypatch.delenv("GOLDENS_UV", raising=False)
        assert venv.uv_binary() is not None  # uv is a dependency of goldens
    plan = lambda: [("install goldens_probe", venv.INSTALL, ["goldens_probe==1.0"])]  # noqa: E731
    python = venv.ensure("probe", plan, "import goldens_probe; print(goldens_probe.V)", "1.0")
    assert python.exists()
    marker = (tmp_path / "cache" / "probe" / venv.MARKER).read_text()
    assert marker.startswith("1.0 in ") and f"({installer})" in marker
    log = (tmp_path / "cache" / "probe.install.log").read_text()
    assert ("uv pip install" in log) == (installer == "uv")
    # what the check imported is compiled once, so later starts do not compile it again
    assert list((tmp_path / "cache" / "probe").rglob("goldens_probe.*.pyc"))


class _Index:
    """A PEP 503 index on a real socket (a directory served over HTTP), counting requests."""

    def __init__(self, root: Path):
        import functools
        import threading
        from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

        index = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self):
                index.requests += 1
                super().do_GET()

            def log_message(self, *args):
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.integration
def test_a_warm_uv_cache_makes_a_venv_without_asking_the_index(configured, tmp_path, monkeypatch):
    """The second venv of the same pins is made from uv's cache alone: the index (a real one on
    a socket) is not asked again. A pin the cache lacks still goes to the index."""
    packages = tmp_path / "index" / "goldens-probe"
    _wheel(packages, "goldens_probe", "1.0")
    index = _Index(tmp_path / "index")
    try:
        configured.write_text(f"[global]\nindex-url = {index.url}\n")
        monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
        monkeypatch.delenv("GOLDENS_UV", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")

        def make(name: str, version: str) -> None:
            plan = lambda: [("install goldens_probe", venv.INSTALL, [f"goldens_probe=={version}"])]  # noqa: E731
            venv.ensure(name, plan, "import goldens_probe; print(goldens_probe.V)", version)

        make("first", "1.0")
        asked = index.requests
        assert asked > 0  # a cold cache: the index served the page and the wheel
        make("second", "1.0")
        assert index.requests == asked
        _wheel(packages, "goldens_probe", "2.0")
        make("third", "2.0")  # not in the cache: --offline fails, the index is asked
        assert index.requests > asked
        log = (tmp_path / "cache" / "third.install.log").read_text()
        assert log.count("uv pip install") == 2 and "--offline" in log
    finally:
        index.close()


@pytest.mark.integration
def test_the_next_venv_compiles_what_the_last_check_imported_beside_its_own_check(configured, tmp_path,
                                                                                   monkeypatch):
    """The modules a check imported are recorded; the next venv for the same check compiles them
    in a helper process while its check runs: here its check imports nothing, and the probe is
    compiled all the same. A recorded path outside site-packages is never compiled."""
    _probe_in_find_links(configured, tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    check = "import os\nif os.environ.get('PROBE_IMPORT'):\n    import goldens_probe\nprint('ok')"
    plan = lambda: [("install goldens_probe", venv.INSTALL, ["goldens_probe==1.0"])]  # noqa: E731

    monkeypatch.setenv("PROBE_IMPORT", "1")
    venv.ensure("first", plan, check, "ok")
    [listing] = (tmp_path / "cache" / "venv-imports").iterdir()
    assert "goldens_probe.py" in listing.read_text().splitlines()
    assert not (tmp_path / "cache" / "first" / ".imports").exists()

    outside = tmp_path / "outside.py"
    outside.write_text("X = 1\n")
    listing.write_text(listing.read_text() + "../" * 12 + str(outside).lstrip("/") + "\n")
    monkeypatch.delenv("PROBE_IMPORT")
    venv.ensure("second", plan, check, "ok")
    assert list((tmp_path / "cache" / "second").rglob("goldens_probe.*.pyc"))
    assert not (tmp_path / "__pycache__").exists()
    assert "goldens_probe.py" not in listing.read_text().splitlines()  # what this check imported


@pytest.mark.integration
def test_the_next_venv_imports_the_bytecode_an_earlier_venv_compiled_for_the_same_source(configured, tmp_path,
                                                                                          monkeypatch):
    """A check's bytecode is kept under the sha256 of each module's source, and the next venv is
    given it before its check imports: shown by replacing the kept bytecode of goldens_probe 1.0
    with another's, which the next venv then runs. Release 2.0's source differs, so its venv
    compiles its own."""
    import importlib.util
    import marshal

    _probe_in_find_links(configured, tmp_path, monkeypatch)
    _wheel(tmp_path / "wheels", "goldens_probe", "2.0")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    check = "import goldens_probe; print(goldens_probe.V)"
    plan = lambda v: lambda: [("install goldens_probe", venv.INSTALL, [f"goldens_probe=={v}"])]  # noqa: E731

    venv.ensure("first", plan("1.0"), check, "1.0")
    source = b"V = '1.0'\n"
    key = hashlib.sha256(source).hexdigest()
    kept = tmp_path / "cache" / "venv-bytecode" / importlib.util.MAGIC_NUMBER.hex() / key[:2] / key
    assert marshal.loads(kept.read_bytes()).co_consts[0] == "1.0"  # what the first check compiled
    kept.write_bytes(marshal.dumps(compile("V = 'from the store'\n", "goldens_probe.py", "exec")))
    with pytest.raises(GoldensError, match="the check after install failed: from the store"):
        venv.ensure("second", plan("1.0"), check, "1.0")  # it ran the kept bytecode, not its own
    venv.ensure("third", plan("2.0"), check, "2.0")  # another source: compiled in its own venv
    assert "goldens_probe.py" in next((tmp_path / "cache" / "venv-imports").iterdir()).read_text()


@pytest.mark.integration
def test_a_venv_whose_check_fails_is_not_trusted(configured, tmp_path, monkeypatch):
    _probe_in_find_links(configured, tmp_path, monkeypatch)
    plan = lambda: [("install goldens_probe", venv.INSTALL, ["goldens_probe==1.0"])]  # noqa: E731
    with pytest.raises(GoldensError, match="the check after install failed"):
        venv.ensure("probe", plan, "import goldens_probe; print(goldens_probe.V)", "2.0")
    assert not (tmp_path / "cache" / "probe").exists()


def test_a_download_reports_progress_on_stderr_and_checks_its_sha256(tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)  # a file: URL in tmp_path, nothing heavy: the fast tier keeps it
    blob = b"x" * (3 << 20)
    (tmp_path / "a-1.0.tar.gz").write_bytes(blob)
    url = (tmp_path / "a-1.0.tar.gz").as_uri()
    good = registry.File("a-1.0.tar.gz", "1.0", hashlib.sha256(blob).hexdigest(), url)
    (tmp_path / "into").mkdir()
    assert registry.download(good, tmp_path / "into").read_bytes() == blob
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines()[0] == "downloading a-1.0.tar.gz: started"
    assert err.splitlines()[-1].startswith("downloading a-1.0.tar.gz: done in ")
    bad = registry.File("a-1.0.tar.gz", "1.0", "0" * 64, url)
    with pytest.raises(GoldensError, match="is not the index's"):
        registry.download(bad, tmp_path / "into")


def test_the_index_and_a_redirected_download_go_through_goldens_http(configured, tmp_path, capfd, monkeypatch):
    """The registry reads an index and downloads a file through generator/http.py (proxy settings,
    one deadline): a listing over a real socket, and a file behind a redirect, streamed and
    checked. A missing project is one line naming the index."""
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)  # an index this test serves on 127.0.0.1: nothing heavy
    import json

    blob = b"y" * (2 << 20)
    (tmp_path / "index" / "probe").mkdir(parents=True)
    (tmp_path / "index" / "files").mkdir()
    (tmp_path / "index" / "files" / "probe-1.0.tar.gz").write_bytes(blob)
    index = _Index(tmp_path / "index")
    import urllib.request

    def no_urllib(*args, **kwargs):
        raise AssertionError("the registry read the network without generator/http.py")

    monkeypatch.setattr(urllib.request, "urlopen", no_urllib)
    try:
        listing = {"files": [{"filename": "probe-1.0.tar.gz", "url": index.url + "files/moved",
                              "hashes": {"sha256": hashlib.sha256(blob).hexdigest()}}], "versions": ["1.0"]}
        (tmp_path / "index" / "probe" / "index.html").write_text(json.dumps(listing))
        configured.write_text(f"[global]\nindex-url = {index.url}\n")
        registry.index_config.cache_clear()
        registry._listing.cache_clear()
        assert registry.versions("probe") == ["1.0"]
        # the file's URL answers 301 with its real place (SimpleHTTPRequestHandler: a directory
        # without its slash); a file named "moved" is that directory's index
        (tmp_path / "index" / "files" / "moved").mkdir()
        (tmp_path / "index" / "files" / "moved" / "index.html").write_bytes(blob)
        (tmp_path / "into").mkdir()
        [file] = registry.files("probe")
        requests = index.requests
        assert registry.download(file, tmp_path / "into").read_bytes() == blob
        assert index.requests == requests + 2  # the redirect, then the file
        assert capfd.readouterr().err.splitlines()[-1].startswith("downloading probe-1.0.tar.gz: done in ")
        with pytest.raises(GoldensError, match=r"^absent: not on the package index http://127\.0\.0\.1:\d+$"):
            registry.versions("absent")
    finally:
        index.close()
        registry._listing.cache_clear()
