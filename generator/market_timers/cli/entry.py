"""`market-timers`: the parser (parser.py, every subcommand and its --help) and the dispatch to
the commands (commands.py). Heavy imports (pandas, exchange_calendars) happen inside the commands
that need them, so that `--help`, the alert handlers and `outbox flush` start fast.
"""

from __future__ import annotations

import os
import sys

from market_timers.cli.commandcontext import UsageError
from market_timers.cli.commands import COMMANDS
from market_timers.cli.parser import CRON_QUOTE_HINT, build_parser
from market_timers.contracts.exitcodes import USAGE
from market_timers.schema.problems import ConfigError

__all__ = ["COMMANDS", "UsageError", "build_parser", "main"]


def _glue_signed_values(argv: list[str]) -> list[str]:
    """`--offset -15min` -> `--offset=-15min`: argparse would take "-15min" for an option."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--offset" and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"--offset={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(_glue_signed_values(argv))
    if extra:
        hint = f"\n{CRON_QUOTE_HINT}" if args.command == "check-cron" else ""
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    stdout = sys.stdout
    sys.stdout = _PipeGuard(stdout)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as e:
        print("\n".join(e.problems.lines()), file=sys.stderr)
        print(f"market-timers: {len(e.problems.items)} problem(s) in the config; nothing was "
              "changed", file=sys.stderr)
        return USAGE
    except UsageError as e:
        print(f"market-timers {args.command}: {e}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
        sys.stdout = stdout


class _PipeGuard:
    """stdout that a closed pipe (`plan | head -1`) cannot break: the rest is discarded.

    The command goes on to its end (a sync or a flush is never cut short by its reader going
    away); fd 1 then points at /dev/null so that the interpreter's last flush is quiet too.
    """

    def __init__(self, stream) -> None:
        self._stream = stream
        self._broken = False

    def _guard(self, fn, *a):
        if self._broken:
            return None
        try:
            return fn(*a)
        except BrokenPipeError:
            self._broken = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            except (OSError, ValueError, AttributeError):
                pass
            return None

    def write(self, text: str) -> int:
        self._guard(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
