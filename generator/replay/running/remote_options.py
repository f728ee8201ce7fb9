"""`check`'s options for running servers: `--url`, `--served-model`, `--header`, `--api-key-env`.

The policy for reaching a server someone else runs: which engine a URL is for, that it answers
before the run starts, and the names, headers and key sent to it (secrets from the moment they
are read: no error here or later ever prints them).
"""

from __future__ import annotations

import os

from generator.errors import GoldensError


def urls(values: tuple[str, ...]) -> dict[str, str]:
    """`--url ENGINE=URL` (or a bare URL when one engine is chosen) into {engine: url}; a URL's
    userinfo (`user:pass@`) is a secret from here on."""
    from generator import redaction

    out = {}
    for value in values:
        engine, sep, url = value.partition("=")
        if not sep or "://" in engine:
            engine, url = "", value
        redaction.register(*redaction.url_secrets(url))
        out[engine] = url
    return out


def probe(url_map: dict[str, str], timeout: float, transport=None) -> None:
    """Every --url must name a known engine and answer before the run: one line, not an error
    per case. Any HTTP answer will do (a health page, a 404): the server is there. `transport`:
    how it is asked (http.DEFAULT unless given)."""
    from generator import http
    from generator.config import engine_registry
    from generator.engines import EngineError
    from generator.engines.pool import check_url

    for engine, url in url_map.items():
        engine_registry.lookup(engine, f"--url {engine}=...")
        url = check_url(engine, url)
        try:
            (transport or http.DEFAULT).with_timeout(min(timeout, 30.0)).request(
                "GET", url, where=f"{engine}: cannot reach {url}")
        except EngineError as error:
            raise GoldensError(str(error)) from None


def connection(config, model_names: tuple[str, ...], served: tuple[str, ...], headers: tuple[str, ...],
               api_key_env: str | None, jobs: int):
    """--served-model, --header and --api-key-env as one Connection. Header values and the key
    are secrets: no error here or later ever prints them."""
    from generator.engines.remote import Connection, parse_header

    served_map = {}
    for value in served:
        model, sep, name = value.partition("=")
        if sep:
            config.select([model])
        elif len(model_names) == 1:
            model, name = model_names[0], value
        else:
            raise GoldensError(f"--served-model {value}: without MODEL= it needs exactly one --model")
        if not name.strip():
            raise GoldensError(f"--served-model {value}: the served name is empty")
        served_map[model] = name.strip()
    from generator import redaction

    header_map = dict(parse_header(value, i) for i, value in enumerate(headers))
    api_key = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env, "").strip()
        redaction.register(api_key)
        if not api_key:
            raise GoldensError(f"--api-key-env {api_key_env}: that environment variable is not set or empty")
        if any(name.lower() == "authorization" for name in header_map):
            raise GoldensError("give the API key with --api-key-env or an Authorization --header, not both")
    return Connection(served=served_map, headers=header_map, api_key=api_key, jobs=jobs)
