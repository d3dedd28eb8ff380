"""``python -m pipeline.cli.child '<json>'``: one ``report`` run in a child process that
:mod:`pipeline.cli.supervise` watches for native crashes; the JSON object holds
:func:`pipeline.cli.run_report.report`'s arguments by name."""

import json
import sys

from ..interrupts import terminate_as_interrupt
from .run_report import REPORT_ARGS, report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pipeline.cli.child '<JSON object of report's arguments>'", file=sys.stderr)
        return 2
    kwargs = json.loads(argv[0])
    unknown = sorted(set(kwargs) - set(REPORT_ARGS))
    if unknown:
        print(f"pipeline.cli.child: not an argument of report: {', '.join(unknown)}", file=sys.stderr)
        return 2
    terminate_as_interrupt()  # a forwarded SIGTERM stops the run as Ctrl-C does
    return report(**kwargs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
