"""`goldens` command line: thin click commands over importable functions.

Each command here only declares its options and calls one function of generator/commands/, which
joins the stages (`call` imports it when that command runs). One exit-code contract for every command
(EXIT_CODES, also in `goldens --help` and README), applied once, by the `Goldens` group
(generator/cli_support.py): every exception a command lets escape is one line on stderr and exit
2; exit 1 comes only from a verdict (drift found).
"""

from __future__ import annotations

from pathlib import Path

import click

from generator.cli_support import Goldens, Seconds, call, start
from generator.config import engine_registry
from generator.config.engine_registry import BUILT_IN as BUILT_IN_ENGINES

EXIT_CODES = """\b
Exit codes, for every command:
  0    all checked and matching (or the command did what it was asked)
  1    drift found: a verdict, and nothing else
  2    could not judge: bad input, an unreachable or misbehaving engine,
       nothing checked, or an internal error (GOLDENS_DEBUG=1 or --debug
       shows its traceback)
  130  interrupted (Ctrl-C); 143 terminated (SIGTERM); 141 output pipe closed
"""

GOLDENS_OPTION = click.option("--goldens", "root", default="goldens", show_default=True,
                              type=click.Path(file_okay=False, path_type=Path), help="Directory of golden files.")
CONFIG_OPTION = click.option(
    "--config", "config_path", default="models.yaml", show_default=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The model matrix.",
)


@click.group(cls=Goldens, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(package_name="goldens")
@click.option("--debug", is_flag=True, help="Show the traceback of an error (also GOLDENS_DEBUG=1).")
def main(debug: bool) -> None:
    """Golden-token regression suites for LLM serving."""
    start()


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
def init_command(**options) -> None:
    """Start goldens in a repository: a commented models.yaml for the models named, the
    .gitignore lines, and a CI workflow calling goldens' reusable workflow. Existing files are
    never replaced (exit 2, nothing written)."""
    call("generator.commands.init:command", options)


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
              help="Choose each model's dialect cases again and rewrite models.dialects.lock (docs/dialects.md).")
@click.option("--write-invariants", is_flag=True, help="Write the invariants: review it prints into models.yaml.")
def regenerate(**options) -> None:
    """Render the models whose inputs changed (every model with --force) and write the goldens
    that changed; remove only this matrix's own stale goldens and ledger entries, each named."""
    call("generator.commands.goldens:regenerate_command", options)


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--request", "request_file", required=True, metavar="FILE",
              help="An OpenAI-style chat body (messages, tools, chat_template_kwargs); - for stdin.")
def render(**options) -> None:
    """Print the reference's ids, pieces and prompt for one request, as JSON, with what was
    normalized and the prompt's invariant findings (each also one line on stderr)."""
    call("generator.commands.goldens:render_command", options)


@main.command(epilog=EXIT_CODES)
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--request", "request_file", required=True, metavar="FILE",
              help="A chat body ending in the assistant message the output should parse to (+ optional "
                   "`output`: the raw text the model emitted); - for stdin.")
@click.option("--engine", "engine_names", multiple=True, metavar="NAME[@VERSION]",
              help="An engine whose parse is judged (repeatable; default: the model's engines that parse).")
@click.option("--url", "urls", multiple=True, metavar="[ENGINE=]URL", help="Use a running server (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.parse/1) instead.")
@click.option("--request-timeout", default=60.0, type=Seconds(), help="Seconds per request [default: 60].")
def parse(**options) -> None:
    """The output side of one case: its output ids, the message they should parse to, and each
    engine's parse, whole and in every chunk plan, judged as `check` judges a parse golden."""
    call("generator.commands.parse:parse_command", options)


@main.command(name="models")
@CONFIG_OPTION
@click.option("--resolve", "do_resolve", is_flag=True, help="Also fetch sources and show their current hashes.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.models/1) instead.")
def list_models(**options) -> None:
    """The matrix (each model's sources, shapes, variants, engines, pins) and the built-in families."""
    call("generator.commands.listing:models_command", options)


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
@GOLDENS_OPTION
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
@click.option("--no-confirm", is_flag=True, help="Skip confirming stand-in endpoints (llama-server "
              "/apply-template + /tokenize, vLLM /tokenize) on the serving path; every report says so.")
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
@click.option("--axis", type=click.Choice(["render", "parse", "both"]), default="both", show_default=True,
              help="The render goldens (request -> prompt ids), the parse goldens (output ids -> message), or both.")
def check(**options) -> None:
    """Replay goldens through engines; exit 0 all match, 1 drift, 2 could not judge."""
    call("generator.commands.replay:check_command", options)


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
def report_merge(**options) -> None:
    """Merge the --results of `check --shard K/N` runs into the reports one unsharded run writes;
    exit with the merged verdict (2 when a shard is missing, named)."""
    call("generator.commands.replay:report_merge_command", options)


@main.command(name="engines")
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.engines/1) instead.")
@click.option("--matrix", "as_matrix", is_flag=True,
              help="Print the model x engine matrix of the config (Markdown): replayed, or why not.")
def list_engines(**options) -> None:
    """The engines goldens can replay through: built-in, and those installed packages register
    in the `goldens.engines` entry-point group, each with where it came from."""
    call("generator.commands.listing:engines_command", options)


@main.command()
@CONFIG_OPTION
@click.option("--engine", "engine_name", help="The engine whose answer is reviewed.")
@click.option("--case", "case_ids", multiple=True, help="A case id, e.g. qwen3/tools (repeatable).")
@click.option("--reason", help="Why this divergence is accepted (kept in the entry).")
@click.option("--class", "klass", type=click.Choice(["engine-defect", "policy", "reference"]),
              help="What it is: an engine's bug, its documented behaviour, or the reference's error.")
@click.option("--upstream", multiple=True, metavar="URL", help="The engine-defect's upstream issue (repeatable).")
@click.option("--report", "report_cause", metavar="CAUSE", help="Write the engine-defect CAUSE's report to file.")
@click.option("--json", "as_json", is_flag=True, help="With nothing to record: the ledger's count as JSON.")
@click.option("--url", metavar="URL", help="Use this running server instead of starting one.")
@GOLDENS_OPTION
@click.option("--stand-in", "stand_in", is_flag=True, help="Record the stand-in endpoint where it disagrees with serving.")
@click.option("--cause", "cause_name", metavar="NAME", help="Record a reviewed cause (goldens/causes/NAME.json).")
@click.option("--edit", "edit_text", metavar="EDIT", help="The cause's edit of the golden's ids: 'insert IDS at "
              "start|end', 'delete IDS at start|end|every', 'replace IDS with IDS at start|end|every'.")
@click.option("--finding", "findings", multiple=True, help="A parse cause's finding (repeatable; docs/parse.md).")
@click.option("--model", "model_names", multiple=True, help="A model the cause covers (repeatable).")
@click.option("--replace-entries", is_flag=True, help="Remove the per-case entries the recorded cause explains.")
def ledger(**options) -> None:
    """Record a reviewed divergence or cause (docs/ledger.md); alone, count causes and classes."""
    call("generator.commands.ledger:command", options)


@main.command(name="diff")
@click.argument("rev", default="HEAD")
@GOLDENS_OPTION
@click.option("--markdown", is_flag=True, help="Print Markdown for a pull request (long changes folded).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the Markdown view here (for a pull-request comment).")
@click.option("--context", default=3, show_default=True, type=click.IntRange(0, 50),
              help="Unchanged tokens shown around each change.")
@click.option("--full", is_flag=True, help="Show every row of a long change instead of cutting it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (goldens.diff/1) instead of the view.")
def diff_command(**options) -> None:
    """Token-level view of every golden changed against a git revision (default: HEAD)."""
    call("generator.commands.goldens:diff_command", options)


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_name", required=True, help="A model of the matrix.")
@click.option("--engine", "engine_names", multiple=True, default=(engine_registry.REFERENCE,), show_default=True,
              help="The engine whose ids are checked, NAME or NAME@VERSION (repeatable: side by side; "
                   "a server engine starts a managed server).")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Chat-template kwargs (default: every variant).")
@click.option("--conversation", "conversation_file", metavar="FILE",
              help="A chat body holding the whole recorded conversation (or a JSON list of the "
                   "requests as sent); - for stdin. Default: the multi-turn shapes.")
@click.option("--url", metavar="URL", help="Use this running server for --engine instead of starting one.")
@click.option("--cache-busters", "busters", is_flag=True,
              help="Also show the client behaviours that break the prefix, each with its fix.")
def prefix(**options) -> None:
    """Check that each request of a conversation starts with the one before (exit 1 on a break)."""
    call("generator.commands.prefix:command", options)


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
def bisect_command(**options) -> None:
    """Binary search over the published releases from --good to --bad for the first whose ids
    differ from --good's; exit 0 found, 1 good and bad agree, 2 bad input."""
    call("generator.commands.replay:bisect_command", options)


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
def history_command(**options) -> None:
    """Every release from --from to --to after which some case's ids differ from the release
    before, by recursive k-ary search; exit 0 none changed, 1 some did, 2 bad input."""
    call("generator.commands.replay:history_command", options)


@main.command()
@CONFIG_OPTION
@click.option("--model", "model_names", multiple=True, help="Only this model (repeatable).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the Markdown view here (one table, the spans folded).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--engine", "engine_names", multiple=True,
              help="Measure this engine's request layer instead (repeatable): "
                   + ", ".join(engine_registry.measured()) + ".")
def coverage(**options) -> None:
    """Per model, the share of its template's code the matrix's reference renders execute, with
    every never-executed span; with --engine, the share of each engine's request layer
    (docs/engine-coverage.md)."""
    call("generator.commands.coverage:coverage_command", options)


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
def requests_search(**options) -> None:
    """Search request variations for ones that execute template (or, with --engine, request-layer)
    code the matrix does not, and write the minimal set that does as request files."""
    call("generator.commands.coverage:requests_search_command", options)


@requests_group.command(name="import")
@CONFIG_OPTION
@click.argument("log")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Write the kept bodies here, one request file each.")
@click.option("--model", "model_names", multiple=True,
              help="A model that will render them (repeatable; default: every model).")
@click.option("--redact", is_flag=True, help="Replace message text with placeholder text of the same form.")
def requests_import(**options) -> None:
    """Logged OpenAI chat bodies (JSONL, a folder of JSON files) or a pinned registry corpus
    (corpus:bfcl) to the smallest set of request files reaching what the whole log reaches."""
    call("generator.commands.coverage:requests_import_command", options)


if __name__ == "__main__":
    main()
