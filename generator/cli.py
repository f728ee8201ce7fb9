"""`goldens` command line: thin click commands over importable functions.

One exit-code contract for every command (EXIT_CODES, also in `goldens --help` and README):
the `Goldens` group maps every exception a command lets escape to one line on stderr and exit
2; exit 1 comes only from a verdict (drift found). SIGTERM and SIGINT stop every managed server
and leave through the same cleanup as an error (writes are atomic, claims released).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
import traceback
from pathlib import Path

import click

from generator.config import engine_registry
from generator.config.cases import model_cases
from generator.config.engine_registry import BUILT_IN as BUILT_IN_ENGINES
from generator.errors import GoldensError, one_line

EXIT_CODES = """\b
Exit codes, for every command:
  0    all checked and matching (or the command did what it was asked)
  1    drift found: a verdict, and nothing else
  2    could not judge: bad input, an unreachable or misbehaving engine,
       nothing checked, or an internal error (GOLDENS_DEBUG=1 or --debug
       shows its traceback)
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM); 141 output pipe closed
"""

CONFIG_OPTION = click.option(
    "--config", "config_path", default="models.yaml", show_default=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The model matrix.",
)


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    flag = ctx is not None and ctx.find_root().params.get("debug")
    return bool(flag) or os.environ.get("GOLDENS_DEBUG", "") not in ("", "0")


class Seconds(click.ParamType):
    """A duration: a finite number of seconds above 0 (`nan` would silently disable a deadline,
    `inf` make one wait forever)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        import math

        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 0 < seconds <= 10**7:
            self.fail(f"{value!r}: expected a number of seconds above 0 and at most 10000000", param, ctx)
        return seconds


def friendly(command):
    """The exit-code contract around a command: GoldensError is its one line and exit 2, Ctrl-C
    exit 130, and anything else a bug, reported as one `internal error` line and exit 2 (never
    1, which means drift). The `Goldens` group applies it to every command."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            result = command(*args, **kwargs)
            if sys.stdout is not None:
                sys.stdout.flush()  # a full disk or a closed pipe is said here, not at exit
            return result
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.exceptions.ClickException as error:  # a usage error: one line too, exit 2
            used = " ".join(["goldens", *error.ctx.command_path.split()[1:]]) if getattr(error, "ctx", None) else ""
            where = f" (see {used} --help)" if used else ""
            click.echo(f"goldens: error: {' '.join(error.format_message().split())}{where}", err=True)
            sys.exit(error.exit_code)
        except GoldensError as error:
            if _debug():
                traceback.print_exc()
            click.echo(f"goldens: error: {one_line(str(error))}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("goldens: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:  # `goldens models | head`: the reader left; nothing is wrong
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except OSError as error:
            if error.filename is not None or error.errno not in (errno.ENOSPC, errno.EBADF, errno.EIO, errno.EDQUOT):
                _internal(error)
            with contextlib.suppress(OSError, ValueError):  # stdout first: it is the one failing
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            with contextlib.suppress(OSError, ValueError, AttributeError):
                click.echo(f"goldens: error: cannot write the output ({error.strerror})", err=True)
            sys.exit(2)
        except Exception as error:
            _internal(error)

    return wrapper


def _internal(error: BaseException) -> None:
    """A bug: one `internal error` line (the traceback under --debug), exit 2."""
    if _debug():
        traceback.print_exc()
    message = one_line(" ".join(str(error).split())[:300])
    hint = "" if _debug() else " (a bug in goldens; GOLDENS_DEBUG=1 or --debug shows the traceback)"
    click.echo(f"goldens: internal error: {type(error).__name__}: {message}{hint}", err=True)
    sys.exit(2)


class Goldens(click.Group):
    """Every command runs inside `friendly`, including ones that forgot the decorator."""

    def invoke(self, ctx: click.Context):
        from generator import redaction

        redaction.clear()  # each command starts with no secret known, and forgets them when done
        try:
            return friendly(super().invoke)(ctx)
        finally:
            redaction.clear()


# The commands whose output the reference's releases shape: run at the pins whatever is installed.
RENDERS = frozenset({"regenerate", "render", "check", "ledger", "prefix", "coverage", "requests", "bisect"})


@click.group(cls=Goldens, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(package_name="goldens")
@click.option("--debug", is_flag=True, help="Show the traceback of an error (also GOLDENS_DEBUG=1).")
def main(debug: bool) -> None:
    """Golden-token regression suites for LLM serving."""
    from generator import budget, redaction
    from generator.servers.process import handle_signals

    if sys.stdout is None:  # started with stdout closed: what it would say is lost, so say that
        click.echo("goldens: error: stdout is closed; nothing this command prints could be read", err=True)
        sys.exit(2)
    redaction.install()
    handle_signals()
    budget.render_seconds()  # a bad GOLDENS_RENDER_DEADLINE is one line now, not every render's error
    if click.get_current_context().invoked_subcommand in RENDERS:
        from generator.servers import transformers_reference

        transformers_reference.rerun_at_pins(sys.argv[1:])  # returns when the stack here is the pinned one


@main.command(name="init")
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--hf", multiple=True, metavar="ORG/NAME@REVISION", help="A Hugging Face model at a pinned revision (repeatable).")
@click.option("--gguf", multiple=True, metavar="PATH", help="A GGUF file: tokenizer and template from its metadata (repeatable).")
@click.option("--dir", "dirs", multiple=True, metavar="PATH",
              help="A directory with tokenizer.json + tokenizer_config.json (repeatable).")
@click.option("--engine", "engines", multiple=True,
              help="An engine every model lists (repeatable; default: transformers, minijinja).")
@click.option("--repository", metavar="OWNER/NAME[@REF]",
              help="Where the workflow takes goldens' reusable workflow and package from "
                   "(default: goldens-project/goldens at this release's tag).")
@friendly
def init_command(directory: Path, hf: tuple[str, ...], gguf: tuple[str, ...], dirs: tuple[str, ...],
                 engines: tuple[str, ...], repository: str | None) -> None:
    """Start goldens in a repository: a commented models.yaml for the models named, the
    .gitignore lines, and a CI workflow calling goldens' reusable workflow. Existing files are
    never replaced (exit 2, nothing written)."""
    from generator import init

    for line in init.init(directory, hf, gguf, dirs, engines, repository=repository):
        click.echo(line)


@main.command()
@CONFIG_OPTION
@click.option("--goldens", "out", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@click.option("--out", "old_out", hidden=True, type=click.Path(file_okay=False, path_type=Path),
              help="The old name of --goldens.")
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--update-pins", is_flag=True, help="Accept changed template/tokenizer hashes and rewrite the pins.")
@click.option("--prune", is_flag=True,
              help="Also remove the goldens of models no longer in the config (left alone otherwise).")
@click.option("--force", is_flag=True, help="Render every model, even those whose inputs match the index.")
@click.option("--rechoose-dialects", is_flag=True,
              help="Choose each model's dialect cases again and rewrite dialects.lock (docs/dialects.md).")
@friendly
def regenerate(config_path: Path, out: Path, old_out: Path | None, model_names: tuple[str, ...],
               update_pins: bool, prune: bool, force: bool, rechoose_dialects: bool) -> None:
    """Render the models whose inputs changed (every model with --force) and write the goldens
    that changed; remove only this matrix's own stale goldens and ledger entries, each named."""
    from generator.config import models
    from generator.config.cases import matrix
    from generator.goldens import regenerate as regen
    from generator.progress import progress_bar

    out = old_out or out
    config = models.load(config_path)
    total = len(matrix(config, model_names))
    with progress_bar(total, "rendering") as advance:
        summary = regen.regenerate(config, out, model_names, update_pins=update_pins, advance=advance,
                                   force=force, workers=None, prune=prune,
                                   rechoose_dialects=rechoose_dialects)
    for line in summary.lines():
        click.echo(line)


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--request", "request_file", required=True, metavar="FILE",
              help="An OpenAI-style chat body (messages, tools, chat_template_kwargs); - for stdin.")
@friendly
def render(config_path: Path, model_name: str, request_file) -> None:
    """Print the reference's ids, pieces and prompt for one request, as JSON, with what was
    normalized and the prompt's invariant findings (each also one line on stderr)."""
    from generator import reference
    from generator.analysis import invariants
    from generator.config import models
    from generator.config.request import carries_media, parse_request, read_body
    from generator.sources.source import resolve

    config = models.load(config_path)
    (model,) = config.select([model_name])
    request = parse_request(*read_body(request_file))
    source = resolve(model, config)
    request["chat_template_kwargs"] = {**model.kwargs, **request.get("chat_template_kwargs", {})}
    result = reference.render_request(source, request, config.date)  # expanded when it carries images
    if result.error is not None:
        raise GoldensError(f"{model_name}: the template refused this request: {result.error}")
    out = {"ids": result.ids, "pieces": result.pieces, "prompt": result.prompt}
    if result.normalization is not None:
        out["normalization"] = result.normalization
    if not carries_media(request):
        found = invariants.of(source.template, request, result.prompt or "")
        if found.record() is not None:
            out["invariants"] = found.record()
        for finding in found.findings:
            click.echo(f"goldens: invariant finding: {invariants.text(finding)}", err=True)
    click.echo(json.dumps(out, ensure_ascii=False, indent=2))


@main.command(name="models")
@CONFIG_OPTION
@click.option("--resolve", "do_resolve", is_flag=True, help="Also fetch sources and show their current hashes.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.models/1) instead.")
@friendly
def list_models(config_path: Path, do_resolve: bool, as_json: bool) -> None:
    """The matrix: each model's sources, shapes, variants, engines and pins."""
    from generator.config import models
    from generator.sources.source import resolve

    config = models.load(config_path)
    if as_json:
        from generator import documents

        resolved = {m.name: resolve(m, config) for m in config.models.values()} if do_resolve else None
        click.echo(documents.dumps("models", documents.models(config, resolved)), nl=False)
        return
    if config.engine_versions:
        pins = ", ".join(f"{name} {'b' if name == 'llama-server' else ''}{version}"
                         for name, version in config.engine_versions.items())
        click.echo(f"engine versions: {pins}")
    for model in config.models.values():
        spec = model.tokenizer
        where = f"{spec.kind}:{spec.value}" + (f"@{spec.revision}" if spec.revision else "")
        if spec.config:
            where += f" with tokenizer_config {json.dumps(spec.config, sort_keys=True)}"
        template = model.template.kind if model.template.kind == "tokenizer" else f"{model.template.kind}:{model.template.value}"
        variants = ", ".join(v or "default" for v in model.variants)
        click.echo(f"{model.name}: {len(model_cases(model))} cases")
        click.echo(f"  tokenizer: {where}")
        click.echo(f"  template:  {template}" + (f" (name {model.template.name})" if model.template.name else ""))
        click.echo(f"  shapes:    {', '.join(model.shapes)}")
        click.echo(f"  variants:  {variants}")
        if model.dialects:
            kept = ("not chosen yet (goldens regenerate chooses them)" if model.dialect_cases is None
                    else f"{len(model.dialect_cases)} cases kept of {len(model.dialects)} selected (dialects.lock)")
            click.echo(f"  dialects:  {kept}")
        click.echo(f"  engines:   {', '.join(model.engines)}")
        if model.processor is not None:
            click.echo(f"  processor: {model.processor.origin}")
        for key, value in sorted(model.pins.items()):
            click.echo(f"  pin {key}: {value}")
        if do_resolve:
            source = resolve(model, config)
            click.echo(f"  resolved:  {source.origin}; template from {source.template_origin}")
            click.echo(f"  now template_sha256: {source.template_sha256}")
            click.echo(f"  now tokenizer_sha256: {source.tokenizer_sha256}")


def _urls(values: tuple[str, ...]) -> dict[str, str]:
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


def _probe(url_map: dict[str, str], timeout: float) -> None:
    """Every --url must name a known engine and answer before the run: one line, not an error
    per case. Any HTTP answer will do (a health page, a 404): the server is there."""
    from generator import http
    from generator.config import engine_registry
    from generator.engines import EngineError
    from generator.engines.pool import check_url

    for engine, url in url_map.items():
        engine_registry.lookup(engine, f"--url {engine}=...")
        url = check_url(engine, url)
        try:
            http.request("GET", url, where=f"{engine}: cannot reach {url}", timeout=min(timeout, 30.0))
        except EngineError as error:
            raise GoldensError(str(error)) from None


@main.command(epilog=EXIT_CODES)
@CONFIG_OPTION
@click.option("--engine", "engines", multiple=True, metavar="NAME[@VERSION]",
              help="Engine to replay through (repeatable; default: each model's engines): "
                   + ", ".join(info.name for info in BUILT_IN_ENGINES)
                   + ", or one an installed package registers (goldens engines). NAME@VERSION runs another "
                     "release side by side: a llama.cpp build for llama-server and client-completion "
                     "(llama-server@10429), a PyPI release for transformers and vllm (transformers@4.57.6).")
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
@click.option("--served-model", "served", multiple=True, metavar="[MODEL=]NAME",
              help="The name a --url server serves a golden model under (repeatable; implies --model MODEL).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'",
              help="An HTTP header for --url servers, e.g. other auth (repeatable; never printed).")
@click.option("--api-key-env", "api_key_env", metavar="VAR",
              help="Send the API key in environment variable VAR as a Bearer token (never printed).")
@click.option("--timeout", default=3600.0, show_default=True, type=Seconds(),
              help="Seconds for the whole run; cases not judged by then are errors.")
@click.option("--request-timeout", default=60.0, show_default=True, type=Seconds(),
              help="Seconds for one request to an engine, connect to last byte of the reply.")
@click.option("--no-confirm", is_flag=True,
              help="Skip confirming stand-in endpoints (llama-server /apply-template + /tokenize, vLLM "
                   "/tokenize) on the serving path; faster, and every report says so.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the run's full result as JSON here (for `goldens report merge`).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's full result as one JSON document on stdout (the --results format).")
@click.option("--shard", "shard_text", metavar="K/N",
              help="Replay only shard K of N: whole (model, engine) groups, balanced by cost.")
@click.option("--durations", "durations_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Balance --shard by the measured seconds in this file (see --store-durations).")
@click.option("--coverage", "with_coverage", is_flag=True,
              help="Add the checked models' template coverage to the Markdown report (a folded section).")
@click.option("--store-durations", "store_durations", type=click.Path(dir_okay=False, path_type=Path),
              help="Write each (model, engine) group's measured seconds into this file (others kept).")
@friendly
def check(config_path: Path, engines: tuple[str, ...], model_names: tuple[str, ...], urls: tuple[str, ...],
          root: Path, jobs: int, junit_path: Path | None, report_path: Path | None,
          served: tuple[str, ...], headers: tuple[str, ...], api_key_env: str | None, timeout: float,
          request_timeout: float, no_confirm: bool, results_path: Path | None, as_json: bool,
          shard_text: str | None, durations_path: Path | None, store_durations: Path | None,
          with_coverage: bool) -> None:
    """Replay goldens through engines; exit 0 all match, 1 drift, 2 could not judge."""
    from generator.config import models
    from generator.goldens import staleness
    from generator.progress import progress_bar
    from generator.replay import check as checking
    from generator.replay import destination, publish, shard
    from generator.replay import results as results_data

    config = models.load(config_path)
    url_map = _urls(urls)
    if "" in url_map:
        if len(engines) != 1:
            raise GoldensError("--url without ENGINE= needs exactly one --engine")
        url_map[engines[0].partition("@")[0]] = url_map.pop("")
    connection = _connection(config, model_names, served, headers, api_key_env, jobs)
    model_names = model_names or tuple(connection.served)
    work = checking.plan(config, engines, model_names, url_map)
    groups = checking.groups(config, work)
    only, part = None, None
    if shard_text is not None:
        part = shard.parse(shard_text)
        durations = shard.read_durations(durations_path) if durations_path is not None else None
        only = set(shard.partition([(f"{m} {spec.label}", len(c)) for m, spec, c in groups], part[1],
                                   durations)[part[0] - 1])
    elif durations_path is not None:
        raise GoldensError("--durations balances --shard; give --shard K/N too")
    destination.check_destination(junit_path, report_path, results_path, store_durations)
    stale = staleness.find(config, root, [m for m, _ in work])  # before any verdict: an edit is not drift
    if stale:
        for item in stale:
            click.echo(f"goldens: error: {item.line()}", err=True)
        sys.exit(2)
    if only is not None and not only:
        results = results_data.Results(checking.selection(config, work), [], shard=part,
                                       notes=[checking.NO_CONFIRM] if no_confirm else [])
        with destination.claim(junit_path, report_path, results_path):
            publish.write_files(results, junit_path, report_path, results_path)
        if as_json:
            click.echo(results_data.dumps(results), nl=False)
        click.echo(f"nothing to check: shard {part[0]}/{part[1]} is empty (the partition gives all "
                   f"{len(groups)} (model, engine) groups to other shards)", err=as_json)
        sys.exit(0)
    _probe(url_map, request_timeout)
    total = sum(len(groups[i][2]) for i in range(len(groups)) if only is None or i in only)
    with destination.claim(junit_path, report_path, results_path), progress_bar(total, "replaying") as advance:
        results = checking.run(config, root, engines, model_names, url_map, jobs, advance=advance,
                               note=lambda message: click.echo(message, err=True),
                               confirm=not no_confirm, timeout=timeout, request_timeout=request_timeout,
                               connection=connection, only=only, shard=part)
        if with_coverage:
            from generator.coverage.trace import coverage_records

            results.coverage = coverage_records(config, sorted({g[0] for i, g in enumerate(groups)
                                                                if only is None or i in only}))
        publish.write_files(results, junit_path, report_path, results_path)
        if store_durations is not None:
            destination.write(store_durations, shard.merged_durations(store_durations, results.durations()))
    code = publish.tell(results, root, click.echo, quiet=as_json)
    if as_json:
        click.echo(results_data.dumps(results), nl=False)
    sys.exit(code)


@main.group(name="report")
def report_group() -> None:
    """Reports of earlier `goldens check` runs."""


@report_group.command(name="merge", epilog=EXIT_CODES)
@click.argument("results_paths", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files (for annotations).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the merged JUnit XML report here.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the merged Markdown report here.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the merged results as JSON here.")
@click.option("--step-summary", is_flag=True,
              help="Append the report to $GITHUB_STEP_SUMMARY and print annotations, as `check` does in Actions.")
@friendly
def report_merge(results_paths: tuple[Path, ...], root: Path, junit_path: Path | None, report_path: Path | None,
                 results_path: Path | None, step_summary: bool) -> None:
    """Merge the --results of `check --shard K/N` runs into the reports one unsharded run writes;
    exit with the merged verdict (2 when a shard is missing, named)."""
    from generator.replay import destination, publish
    from generator.replay import results as results_data

    if step_summary and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise GoldensError("--step-summary: GITHUB_STEP_SUMMARY is not set")
    destination.check_destination(junit_path, report_path, results_path)
    merged, problems, failures = results_data.merge(results_paths)
    merged.notes += [f"not merged: {problem}" for problem in problems]
    with destination.claim(junit_path, report_path, results_path):
        publish.write_files(merged, junit_path, report_path, results_path)
    code = publish.tell(merged, root, click.echo, step_summary=step_summary)
    for problem in problems:
        click.echo(f"goldens: error: {problem}", err=True)
    for failure in failures:
        click.echo(f"goldens: error: {failure}", err=True)
    sys.exit(2 if problems else code)


def _connection(config, model_names: tuple[str, ...], served: tuple[str, ...], headers: tuple[str, ...],
                api_key_env: str | None, jobs: int):
    """--served-model, --header and --api-key-env as one Connection. Header values and the key
    are secrets: no error here or later ever prints them."""
    import os

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


@main.command(name="engines")
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.engines/1) instead.")
@click.option("--matrix", "as_matrix", is_flag=True,
              help="Print the model x engine matrix of the config (Markdown): replayed, or why not.")
@friendly
def list_engines(config_path: Path, as_json: bool, as_matrix: bool) -> None:
    """The engines goldens can replay through: built-in, and those installed packages register
    in the `goldens.engines` entry-point group, each with where it came from."""
    from generator.config import engine_registry

    if as_matrix:
        from generator.config import engine_matrix, models

        click.echo(engine_matrix.markdown(engine_matrix.matrix(models.load(config_path))), nl=False)
        return
    if as_json:
        from generator import documents

        click.echo(documents.dumps("engines", documents.engines(engine_registry.registered())), nl=False)
        return

    rows = [(info.name, info.origin, info.summary + engine_registry.declares(info)
             + (f" [not usable: {info.problem}]" if info.problem else ""))
            for info in engine_registry.registered()]
    widths = [max(len(row[i]) for row in rows) for i in (0, 1)]
    for name, origin, summary in rows:
        click.echo(f"{name.ljust(widths[0])}  {origin.ljust(widths[1])}  {summary}")


@main.command()
@CONFIG_OPTION
@click.option("--engine", "engine_name", required=True, help="The engine whose answer is reviewed.")
@click.option("--case", "case_ids", multiple=True, help="A case id, e.g. qwen3/tools (repeatable).")
@click.option("--reason", required=True, help="Why this divergence is accepted (kept in the entry).")
@click.option("--url", metavar="URL", help="Use this running server instead of starting one.")
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@click.option("--stand-in", "stand_in", is_flag=True,
              help="Record the engine's stand-in endpoint where it disagrees with the serving path.")
@click.option("--cause", "cause_name", metavar="NAME",
              help="Record a reviewed cause (goldens/causes/NAME.json) instead of per-case entries.")
@click.option("--edit", "edit_text", metavar="EDIT",
              help="The cause's edit of the golden's ids: 'insert IDS at start|end', 'delete IDS at "
                   "start|end|every', 'replace IDS with IDS at start|end|every'.")
@click.option("--model", "model_names", multiple=True, help="A model the cause covers (repeatable).")
@click.option("--replace-entries", is_flag=True,
              help="Remove the per-case ledger entries the recorded cause explains exactly.")
@friendly
def ledger(config_path: Path, engine_name: str, case_ids: tuple[str, ...], reason: str, url: str | None,
           root: Path, stand_in: bool, cause_name: str | None, edit_text: str | None,
           model_names: tuple[str, ...], replace_entries: bool) -> None:
    """Record a reviewed divergence: the engine's own ids for a case, beside its golden, with a
    reason; or with --cause, one edit the engine makes on every case of the models named."""
    from generator import redaction, reference
    from generator.config import models
    from generator.config.cases import case_of, model_cases, replays
    from generator.engines.pool import EnginePool
    from generator.replay import causes
    from generator.replay.judge import load_goldens, record, record_cause
    from generator.sources.source import resolve

    redaction.register(*redaction.url_secrets(url or ""))
    config = models.load(config_path)
    if cause_name is not None:
        if case_ids or stand_in or not edit_text or not model_names:
            raise GoldensError("--cause records one edit for whole models: give --edit and --model, not --case "
                               "or --stand-in")
        causes.check_name(cause_name)
        config.select(list(model_names))
    elif edit_text or model_names or replace_entries:
        raise GoldensError("--edit, --model and --replace-entries go with --cause NAME")
    elif not case_ids:
        raise GoldensError("name the cases with --case M/SHAPE, or record a cause with --cause NAME")
    by_model: dict[str, list[str]] = {}
    for case_id in case_ids:
        case = case_of(config, case_id)
        by_model.setdefault(case.model, []).append(case.id)
    config.select(list(by_model))
    with EnginePool(config.date, {engine_name.partition("@")[0]: url} if url else None, versions=config.engine_versions,
                    on_start=lambda message: click.echo(message, err=True)) as pool:
        if cause_name is None:
            for model_name, ids in by_model.items():
                model = config.models[model_name]
                engine = pool.engine(engine_name, model, resolve(model, config))
                for item in load_goldens(root, ids):
                    click.echo(f"recorded {record(engine, item, root, reason, stand_in=stand_in)}")
            return
        per_model = []
        for model_name in model_names:
            model, source = config.models[model_name], resolve(config.models[model_name], config)
            ids = [c.id for c in model_cases(model) if replays(c, engine_name.partition("@")[0])]
            per_model.append((model_name, pool.engine(engine_name, model, source), load_goldens(root, ids)))
        tokenizer = reference.load_tokenizer(resolve(config.models[model_names[0]], config).tokenizer_dir)
        edit = causes.parse(edit_text, lambda ids: reference.pieces(tokenizer, ids))
        path, explained, redundant = record_cause(root, cause_name, edit, engine_name.partition("@")[0],
                                                  per_model, reason, replace_entries)
        click.echo(f"recorded {path}: {edit.describe()} explains {len(explained)} case"
                   f"{'s' if len(explained) != 1 else ''}: {', '.join(explained)}")
        for entry in redundant:
            click.echo(f"{'removed' if replace_entries else 'not needed any more'}: {entry} (the cause explains it)")


@main.command(name="diff")
@click.argument("rev", default="HEAD")
@click.option("--goldens", "root", default="goldens", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
@click.option("--markdown", is_flag=True, help="Print Markdown for a pull request (long changes folded).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the Markdown view here (for a pull-request comment).")
@click.option("--context", default=3, show_default=True, type=click.IntRange(0, 50),
              help="Unchanged tokens shown around each change.")
@click.option("--full", is_flag=True, help="Show every row of a long change instead of cutting it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.diff/1) instead of the view.")
@friendly
def diff_command(rev: str, root: Path, markdown: bool, report_path: Path | None, context: int, full: bool,
                 as_json: bool) -> None:
    """Token-level view of every golden changed against a git revision (default: HEAD): goldens
    whose tokens moved first, then one line per model for provenance- or analysis-only changes."""
    from generator.goldens import diff
    from generator.replay import destination, github

    destination.check_destination(report_path)
    changes = diff.changed(root, rev)
    page = diff.render_markdown(changes, rev, context)
    if report_path is not None:
        destination.write(report_path, page)
    if as_json:
        from generator import documents

        click.echo(documents.dumps("diff", documents.diff(changes, rev)), nl=False)
    else:
        click.echo(page if markdown else diff.render_text(changes, rev, context, full), nl=False)
    github.publish(page, github.diff_annotations(changes), lambda line: click.echo(line, err=True))


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--engine", "engine_names", multiple=True, default=(engine_registry.REFERENCE,), show_default=True,
              help="The engine whose ids are checked, NAME or NAME@VERSION (repeatable: side by side; "
                   "a server engine starts a managed server).")
@click.option("--kwargs", "kwargs_json", metavar="JSON",
              help="Chat-template kwargs, e.g. '{\"enable_thinking\": false}' (default: every variant).")
@click.option("--conversation", "conversation_file", metavar="FILE",
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
    from generator.analysis import prefix_command
    from generator.analysis.prefix import load_conversation
    from generator.config import models

    config = models.load(config_path)
    if url and len(engine_names) != 1:
        raise GoldensError("--url needs exactly one --engine")
    kwargs = prefix_command.parse_kwargs(kwargs_json)
    conversation, name = None, "conversation"
    if conversation_file is not None:
        from generator.config.request import read_body

        data, name = read_body(conversation_file)
        conversation = load_conversation(data, name)
    code = prefix_command.run(
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
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Releases made ready at once per round (builds share the cores); the range is split jobs+1 ways.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document (goldens.bisect/1) on stdout; the progress lines go to stderr.")
@friendly
def bisect_command(config_path: Path, engine_name: str, good: str, bad: str, model_names: tuple[str, ...],
                   case_ids: tuple[str, ...], jobs: int, as_json: bool) -> None:
    """Binary search over the published releases from --good to --bad for the first whose ids
    differ from --good's; exit 0 found, 1 good and bad agree, 2 bad input."""
    from generator.config import engine_spec, models
    from generator.replay import bisect

    config = models.load(config_path)
    name = engine_spec.parse(engine_name).name
    if "@" in engine_name:
        raise GoldensError(f"--engine {engine_name}: bisect takes the versions from --good and --bad")
    good = engine_spec.normalize(name, good, "--good")
    bad = engine_spec.normalize(name, bad, "--bad")
    report = None
    if as_json:
        from generator import documents

        def report(document: dict) -> None:
            click.echo(documents.dumps("bisect", document), nl=False)

    echo = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    sys.exit(bisect.bisect(config, name, good, bad, model_names, case_ids, echo=echo,
                           note=lambda message: click.echo(message, err=True), jobs=jobs, report=report))


@main.command(name="history")
@CONFIG_OPTION
@click.option("--engine", "engine_name", help="llama-server (or client-completion): llama.cpp builds; "
              "transformers: PyPI releases; any engine whose releases can be searched.")
@click.option("--from", "first", help="The oldest release of the range, e.g. 9101 or 4.57.6.")
@click.option("--to", "last", help="The newest release of the range.")
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--case", "case_ids", multiple=True, help="Only this case, e.g. qwen3/tools (repeatable).")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Releases made ready at once (builds share the cores); a segment is split jobs+1 ways.")
@click.option("--exhaustive", is_flag=True, help="Also search segments whose ends agree on every case.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document (goldens.history/1) on stdout; the progress lines go to stderr.")
@click.option("--update-atlas", is_flag=True,
              help="Rerun each atlas range (with --engine, --from, --to: that engine's), extended to the "
                   "newest release where the atlas follows it; rewrite its JSON and the atlas page.")
@click.option("--atlas", "atlas_dir", default="docs/atlas", show_default=True,
              type=click.Path(file_okay=False, path_type=Path), help="The atlas folder (--update-atlas).")
@friendly
def history_command(config_path: Path, engine_name: str | None, first: str | None, last: str | None,
                    model_names: tuple[str, ...], case_ids: tuple[str, ...], jobs: int, exhaustive: bool,
                    as_json: bool, update_atlas: bool, atlas_dir: Path) -> None:
    """Every release from --from to --to after which some case's ids differ from the release
    before, by recursive k-ary search; exit 0 none changed, 1 some did, 2 bad input."""
    from generator.config import engine_registry as registry
    from generator.config import engine_spec, models
    from generator.replay import history

    config = models.load(config_path)
    name = None
    if engine_name is not None:
        name = engine_spec.parse(engine_name).name
        if "@" in engine_name:
            raise GoldensError(f"--engine {engine_name}: history takes the versions from --from and --to")
        first = engine_spec.normalize(name, first, "--from") if first is not None else None
        last = engine_spec.normalize(name, last, "--to") if last is not None else None
    note = (lambda message: click.echo(message, err=True))
    echo = note if as_json else click.echo
    if update_atlas:
        from generator.replay import atlas

        if as_json or model_names or case_ids:
            raise GoldensError("--update-atlas runs the whole matrix; it takes no --json, --model or --case")
        atlas.update(config, atlas_dir, name, first, last, jobs=jobs, exhaustive=exhaustive, echo=echo, note=note)
        sys.exit(0)
    if name is None or first is None or last is None:
        raise GoldensError("history needs --engine, --from and --to (or --update-atlas)")
    result = history.history(config, name, first, last, model_names, case_ids, jobs=jobs,
                             exhaustive=exhaustive, echo=echo, note=note)
    versions = registry.version_line(registry.lookup(name))
    for text in history.summary_lines(result, versions):
        echo(text)
    if as_json:
        from generator import documents

        click.echo(documents.dumps("history", documents.history(result, versions)), nl=False)
    sys.exit(1 if result.changes else 0)


if __name__ == "__main__":
    main()


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the Markdown view here (one table, the spans folded).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--engine", "engine_names", multiple=True,
              help="Measure this engine's request layer instead (repeatable): vllm, mistral-common, "
                   "minijinja, llama-server.")
@friendly
def coverage(config_path: Path, model_names: tuple[str, ...], report_path: Path | None, as_json: bool,
             engine_names: tuple[str, ...]) -> None:
    """Per model, the share of its template's code the matrix's reference renders execute, and
    every never-executed span with its template lines and text. With --engine, the share of
    each engine's request layer (parsing, normalization, validation) the matrix's cases execute
    on the real engine, per file, with the never-executed spans (docs/engine-coverage.md)."""
    from generator.config import models
    from generator.coverage import report as coverage_report
    from generator.coverage.trace import model_coverage
    from generator.replay import destination
    from generator.sources.source import resolve

    destination.check_destination(report_path)
    config = models.load(config_path)
    if engine_names:
        from generator.coverage import engine as engine_coverage

        for name in engine_names:
            engine_coverage.layer(name)  # an unknown engine is one line before anything starts
        note = (lambda name: click.echo(f"  tracing {name}", err=True))
        measured_engines = {name: engine_coverage.measure(name, config, model_names, on_model=note)
                            for name in dict.fromkeys(engine_names)}
        if report_path is not None:
            destination.write(report_path, coverage_report.engine_markdown(measured_engines))
        click.echo(coverage_report.engine_json(measured_engines) if as_json
                   else coverage_report.engine_text(measured_engines), nl=False)
        return
    measured = {model.name: model_coverage(model, resolve(model, config), config)
                for model in config.select(model_names)}
    if report_path is not None:
        destination.write(report_path, coverage_report.markdown(measured))
    click.echo(coverage_report.as_json(measured) if as_json else coverage_report.text(measured), nl=False)


@main.group(name="requests")
def requests_group() -> None:
    """Request files made for you: found by template coverage, or imported from your traffic."""


@requests_group.command(name="search")
@CONFIG_OPTION
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Write the keepers here, as <out>/<model>/<name>.json.")
@click.option("--engine", "engine_names", multiple=True,
              help="Also keep variations that reach this engine's request-layer code nothing else "
                   "reaches (repeatable; models that replay through it).")
@friendly
def requests_search(config_path: Path, model_names: tuple[str, ...], out: Path,
                    engine_names: tuple[str, ...]) -> None:
    """Search request variations for ones that execute template code the matrix does not (and,
    with --engine, engine request-layer code), and write the minimal set that does (greedy
    cover) as request files; coverage before and after."""
    from generator.config import models
    from generator.coverage import engine, search
    from generator.sources.source import resolve

    config = models.load(config_path)
    for name in engine_names:
        engine.layer(name)
    for model in config.select(model_names):
        result = search.search(model, resolve(model, config), config, engines=tuple(dict.fromkeys(engine_names)))
        written = search.write_keepers(result, out)
        click.echo(f"{model.name}: {result.before.percent:.1f}% -> {result.after.percent:.1f}% "
                   f"({result.before.executed} -> {result.after.executed} of {result.after.executable} "
                   f"compiled lines); {len(result.kept)} of {result.tried} variations kept")
        for name, (before, after) in result.engines.items():
            click.echo(f"  {name} {before.version}: {before.percent:.1f}% -> {after.percent:.1f}% "
                       f"({before.executed} -> {after.executed} of {after.executable} request-time lines)")
        for (candidate, gain), path in zip(result.kept, written):
            outcome = "; ".join(sorted(set(candidate.outcomes)))
            click.echo(f"  +{gain:<3d} {path}  ({outcome})")


@requests_group.command(name="import")
@CONFIG_OPTION
@click.argument("log", type=click.Path(exists=True, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Write the kept bodies here, one request file each.")
@click.option("--model", "model_names", multiple=True,
              help="A model that will render them (repeatable; default: every model).")
@click.option("--redact", is_flag=True, help="Replace message text with placeholder text of the same form.")
@friendly
def requests_import(config_path: Path, log: Path, out: Path, model_names: tuple[str, ...], redact: bool) -> None:
    """Logged OpenAI chat bodies (JSONL, or a folder of JSON files) to the smallest set of
    request files that reaches everything the whole log reaches: each model's template code
    and the bodies' structure. A malformed entry is one error line; the rest are imported
    (exit 2 says some input was bad)."""
    from generator.config import models
    from generator.coverage import traffic

    config = models.load(config_path)
    result = traffic.import_log(log, out, config, config.select(model_names), redacting=redact)
    for error in result.errors:
        click.echo(f"goldens: error: {error}", err=True)
    click.echo(f"{result.read} bodies read, {len(result.kept)} kept"
               + (f", {len(result.errors)} malformed" if result.errors else "") + f" (in {out})")
    for name, coverage in result.coverage.items():
        click.echo(f"  {name}: the kept bodies execute {coverage.percent:.1f}% of its template "
                   f"({coverage.executed}/{coverage.executable} compiled lines)")
    if result.errors:
        sys.exit(2)
