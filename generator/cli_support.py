"""What generator/cli.py builds on: the exit-code contract every command runs inside (`friendly`,
applied once, by the `Goldens` group, to every command and subcommand), the startup every command
shares, and the option types.

The contract (EXIT_CODES in cli.py, also in `goldens --help` and README): every exception a
command lets escape is one line on stderr and exit 2; exit 1 comes only from a verdict (drift
found). SIGTERM and SIGINT stop every managed server and leave through the same cleanup as an
error (writes are atomic, claims released).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import traceback

import click

from generator.errors import GoldensError, one_line


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
    """Every command and subcommand runs inside `friendly`: the one place the contract is applied."""

    def invoke(self, ctx: click.Context):
        from generator import redaction

        redaction.clear()  # each command starts with no secret known, and forgets them when done
        try:
            return friendly(super().invoke)(ctx)
        finally:
            redaction.clear()


# The commands whose output the reference's releases shape: run at the pins whatever is installed.
RENDERS = frozenset({"regenerate", "render", "check", "ledger", "prefix", "coverage", "requests", "bisect"})


def start() -> None:
    """What every command does first (the group's callback): secrets hidden from every output,
    the signals handled, the render deadline read, and a rendering command rerun at the pins."""
    from generator import budget, redaction
    from generator.servers.process import handle_signals

    if sys.stdout is None:  # started with stdout closed: what it would say is lost, so say that
        click.echo("goldens: error: stdout is closed; nothing this command prints could be read", err=True)
        sys.exit(2)
    redaction.install()
    handle_signals()
    # Transformers' notes to a user of its models ("PyTorch was not found") are not ours to print:
    # set before any command imports it (coverage did so before generator.reference, which set them)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    budget.render_seconds()  # a bad GOLDENS_RENDER_DEADLINE is one line now, not every render's error
    if click.get_current_context().invoked_subcommand in RENDERS:
        from generator.servers import transformers_reference

        transformers_reference.rerun_at_pins(sys.argv[1:])  # returns when the stack here is the pinned one


def call(target: str, options: dict) -> None:
    """Run a command's function, `module:name`, imported only when that command runs (so
    `goldens --help` and every other command load none of its stage)."""
    import importlib

    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)(**options)
