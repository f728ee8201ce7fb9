"""`goldens` command line: thin click commands over importable functions.

Exit codes: 0 success, 1 drift found, 2 bad input or an engine/source that cannot be reached.
A GoldensError becomes one line on stderr; Ctrl-C exits 130 without a traceback (writes are
atomic, so nothing is left half-written).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from generator.config.cases import model_cases
from generator.errors import GoldensError

CONFIG_OPTION = click.option(
    "--config", "config_path", default="models.yaml", show_default=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The model matrix.",
)


def friendly(command):
    """Map GoldensError to exit 2 with one line, and Ctrl-C to exit 130."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except GoldensError as error:
            click.echo(f"goldens: error: {error}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("goldens: interrupted", err=True)
            sys.exit(130)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="goldens")
def main() -> None:
    """Golden-token regression suites for LLM serving."""


@main.command()
@CONFIG_OPTION
@click.option("--out", default="goldens", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory of golden files.")
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--update-pins", is_flag=True, help="Accept changed template/tokenizer hashes and rewrite the pins.")
@friendly
def regenerate(config_path: Path, out: Path, model_names: tuple[str, ...], update_pins: bool) -> None:
    """Render every case with the reference and write the goldens that changed."""
    from generator.config import models
    from generator.config.cases import matrix
    from generator.goldens import regenerate as regen
    from generator.progress import progress_bar

    config = models.load(config_path)
    total = len(matrix(config, model_names))
    with progress_bar(total, "rendering") as advance:
        summary = regen.regenerate(config, out, model_names, update_pins=update_pins, advance=advance)
    click.echo(str(summary))


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--request", "request_file", required=True, type=click.File("r"),
              help="An OpenAI-style chat body (messages, tools, chat_template_kwargs); - for stdin.")
@friendly
def render(config_path: Path, model_name: str, request_file) -> None:
    """Print the reference's ids, pieces and prompt for one request, as JSON."""
    from generator import reference
    from generator.config import models
    from generator.config.request import parse_request
    from generator.sources.source import resolve

    config = models.load(config_path)
    (model,) = config.select([model_name])
    request = parse_request(request_file.read(), getattr(request_file, "name", "request"))
    source = resolve(model, config)
    request["chat_template_kwargs"] = {**model.kwargs, **request.get("chat_template_kwargs", {})}
    result = reference.render(reference.load_tokenizer(source.tokenizer_dir), source.template, request, config.date)
    if result.error is not None:
        raise GoldensError(f"{model_name}: the template refused this request: {result.error}")
    click.echo(json.dumps({"ids": result.ids, "pieces": result.pieces, "prompt": result.prompt},
                          ensure_ascii=False, indent=2))


@main.command(name="models")
@CONFIG_OPTION
@click.option("--resolve", "do_resolve", is_flag=True, help="Also fetch sources and show their current hashes.")
@friendly
def list_models(config_path: Path, do_resolve: bool) -> None:
    """The matrix: each model's sources, shapes, variants, engines and pins."""
    from generator.config import models
    from generator.sources.source import resolve

    config = models.load(config_path)
    if config.engine_versions:
        pins = ", ".join(f"{name} {'b' if name == 'llama-server' else ''}{version}"
                         for name, version in config.engine_versions.items())
        click.echo(f"engine versions: {pins}")
    for model in config.models.values():
        spec = model.tokenizer
        where = f"{spec.kind}:{spec.value}" + (f"@{spec.revision}" if spec.revision else "")
        template = model.template.kind if model.template.kind == "tokenizer" else f"{model.template.kind}:{model.template.value}"
        variants = ", ".join(v or "default" for v in model.variants)
        click.echo(f"{model.name}: {len(model_cases(model))} cases")
        click.echo(f"  tokenizer: {where}")
        click.echo(f"  template:  {template}" + (f" (name {model.template.name})" if model.template.name else ""))
        click.echo(f"  shapes:    {', '.join(model.shapes)}")
        click.echo(f"  variants:  {variants}")
        click.echo(f"  engines:   {', '.join(model.engines)}")
        for key, value in sorted(model.pins.items()):
            click.echo(f"  pin {key}: {value}")
        if do_resolve:
            source = resolve(model, config)
            click.echo(f"  resolved:  {source.origin}; template from {source.template_origin}")
            click.echo(f"  now template_sha256: {source.template_sha256}")
            click.echo(f"  now tokenizer_sha256: {source.tokenizer_sha256}")


def _urls(values: tuple[str, ...]) -> dict[str, str]:
    """`--url ENGINE=URL` (or a bare URL when one engine is chosen) into {engine: url}."""
    out = {}
    for value in values:
        engine, sep, url = value.partition("=")
        if not sep or "://" in engine:
            engine, url = "", value
        out[engine] = url
    return out


def _probe(url_map: dict[str, str]) -> None:
    """Every --url must name a known engine and answer before the run: one line, not an error per case."""
    import httpx

    from generator.config.models import ENGINE_NAMES
    from generator.engines.pool import check_url

    for engine, url in url_map.items():
        if engine not in ENGINE_NAMES:
            raise GoldensError(f"--url {engine}=...: unknown engine {engine!r} (known: {', '.join(ENGINE_NAMES)})")
        url = check_url(engine, url)
        try:
            httpx.get(url, timeout=httpx.Timeout(30, connect=5))
        except httpx.HTTPError as error:
            raise GoldensError(f"{engine}: cannot reach {url} ({type(error).__name__}: {error})") from None


@main.command()
@CONFIG_OPTION
@click.option("--engine", "engines", multiple=True, help="Engine to replay through (repeatable; default: each model's engines).")
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--url", "urls", multiple=True, metavar="[ENGINE=]URL",
              help="Use a running server instead of starting one (repeatable).")
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@click.option("--jobs", default=8, show_default=True, type=click.IntRange(1, 64), help="Requests in flight.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a JUnit XML report here (one testcase per model, shape and engine).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a Markdown report here (for a pull-request comment).")
@friendly
def check(config_path: Path, engines: tuple[str, ...], model_names: tuple[str, ...], urls: tuple[str, ...],
          root: Path, jobs: int, junit_path: Path | None, report_path: Path | None) -> None:
    """Replay goldens through engines; exit 0 all match, 1 drift, 2 bad input or engine unreachable."""
    import time

    from generator.config import models
    from generator.progress import progress_bar
    from generator.replay import check as checking
    from generator.replay import report

    config = models.load(config_path)
    url_map = _urls(urls)
    if "" in url_map:
        if len(engines) != 1:
            raise GoldensError("--url without ENGINE= needs exactly one --engine")
        url_map[engines[0].partition("@")[0]] = url_map.pop("")
    work = checking.plan(config, engines, model_names, url_map)
    report.check_destination(junit_path, report_path)
    _probe(url_map)
    total = sum(len(model_cases(config.models[m])) * len(e) for m, e in work)
    started = time.monotonic()
    with report.claim(junit_path, report_path), progress_bar(total, "replaying") as advance:
        outcomes = checking.run(config, root, engines, model_names, url_map, jobs, advance=advance,
                                note=lambda message: click.echo(message, err=True))
        if junit_path is not None:
            report.write(junit_path, report.junit_xml(outcomes, time.monotonic() - started))
        if report_path is not None:
            report.write(report_path, report.markdown(outcomes))
    for outcome in outcomes:
        if outcome.status in ("drift", "error"):
            click.echo(f"{outcome.status.upper()} {outcome.case} [{outcome.engine}]: {outcome.detail}")
    for label, version in checking.versions(outcomes).items():
        click.echo(f"{label}: {version}")
    click.echo(checking.summary(outcomes))
    sys.exit(checking.exit_code(outcomes))


@main.command()
@CONFIG_OPTION
@click.option("--engine", "engine_name", required=True, help="The engine whose answer is reviewed.")
@click.option("--case", "case_ids", multiple=True, required=True, help="A case id, e.g. qwen3/tools (repeatable).")
@click.option("--reason", required=True, help="Why this divergence is accepted (kept in the entry).")
@click.option("--url", metavar="URL", help="Use this running server instead of starting one.")
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@friendly
def ledger(config_path: Path, engine_name: str, case_ids: tuple[str, ...], reason: str, url: str | None,
           root: Path) -> None:
    """Record a reviewed divergence: the engine's own ids for a case, beside its golden, with a reason."""
    from generator.config import models
    from generator.engines.pool import EnginePool
    from generator.replay.judge import load_goldens, record
    from generator.sources.source import resolve

    config = models.load(config_path)
    by_model: dict[str, list[str]] = {}
    for case_id in case_ids:
        by_model.setdefault(case_id.split("/", 1)[0], []).append(case_id)
    config.select(list(by_model))
    with EnginePool(config.date, {engine_name.partition("@")[0]: url} if url else None, versions=config.engine_versions,
                    on_start=lambda message: click.echo(message, err=True)) as pool:
        for model_name, ids in by_model.items():
            model = config.models[model_name]
            engine = pool.engine(engine_name, model, resolve(model, config))
            for item in load_goldens(root, ids):
                click.echo(f"recorded {record(engine, item, root, reason)}")


@main.command(name="diff")
@click.argument("rev", default="HEAD")
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@click.option("--markdown", is_flag=True, help="A summary table and diff blocks, for a pull-request comment.")
@click.option("--context", default=3, show_default=True, type=click.IntRange(0, 50),
              help="Unchanged tokens shown around each change.")
@friendly
def diff_command(rev: str, root: Path, markdown: bool, context: int) -> None:
    """Token-level view of every golden changed against a git revision (default: HEAD)."""
    from generator.goldens import diff

    click.echo(diff.diff(root, rev, markdown=markdown, context=context), nl=False)


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--engine", "engine_names", multiple=True, default=("transformers",), show_default=True,
              help="The engine whose ids are checked, NAME or NAME@VERSION (repeatable: side by side; "
                   "a server engine starts a managed server).")
@click.option("--kwargs", "kwargs_json", metavar="JSON",
              help="Chat-template kwargs, e.g. '{\"enable_thinking\": false}' (default: every variant).")
@click.option("--conversation", "conversation_file", type=click.File("r"),
              help="A chat body holding the whole recorded conversation (or a JSON list of the "
                   "requests as sent); - for stdin. Default: the multi-turn shapes.")
@click.option("--url", metavar="URL", help="Use this running server for --engine instead of starting one.")
@click.option("--cache-busters", "busters", is_flag=True,
              help="Also show the client behaviours that break the prefix, each with its fix.")
@friendly
def prefix(config_path: Path, model_name: str, engine_names: tuple[str, ...], kwargs_json: str | None,
           conversation_file, url: str | None, busters: bool) -> None:
    """Check that every request of a conversation starts with the one before it; exit 1 on a break
    outside the tail models.yaml declares for the model and kwargs."""
    from generator.analysis import prefix as prefix_check
    from generator.config import models

    config = models.load(config_path)
    if url and len(engine_names) != 1:
        raise GoldensError("--url needs exactly one --engine")
    kwargs = prefix_check.parse_kwargs(kwargs_json)
    conversation, name = None, "conversation"
    if conversation_file is not None:
        name = getattr(conversation_file, "name", "conversation")
        conversation = prefix_check.load_conversation(conversation_file.read(), name)
    code = prefix_check.run_command(
        config, model_name, engine_names, kwargs, conversation, name, url, busters,
        echo=click.echo, note=lambda message: click.echo(message, err=True),
    )
    sys.exit(code)


@main.command(name="bisect")
@CONFIG_OPTION
@click.option("--engine", "engine_name", required=True,
              help="llama-server (or client-completion): llama.cpp builds; transformers: PyPI releases.")
@click.option("--good", required=True, help="A release whose ids are the baseline, e.g. 10429 or 4.57.6.")
@click.option("--bad", required=True, help="A release whose ids differ from the good one's.")
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--case", "case_ids", multiple=True, help="Only this case, e.g. qwen3/tools (repeatable).")
@friendly
def bisect_command(config_path: Path, engine_name: str, good: str, bad: str, model_names: tuple[str, ...],
                   case_ids: tuple[str, ...]) -> None:
    """Binary search over the published releases from --good to --bad for the first whose ids
    differ from --good's; exit 0 found, 1 good and bad agree, 2 bad input."""
    from generator.config import engine_spec, models
    from generator.config.models import ENGINE_NAMES
    from generator.replay import bisect

    config = models.load(config_path)
    name = engine_spec.parse(engine_name, ENGINE_NAMES).name
    if "@" in engine_name:
        raise GoldensError(f"--engine {engine_name}: bisect takes the versions from --good and --bad")
    good = engine_spec.normalize(name, good, "--good")
    bad = engine_spec.normalize(name, bad, "--bad")
    sys.exit(bisect.bisect(config, name, good, bad, model_names, case_ids, echo=click.echo,
                           note=lambda message: click.echo(message, err=True)))


if __name__ == "__main__":
    main()
