"""Command line: ``python -m pipeline.cli report --profile default`` materializes every asset
into the local Dagster instance (so the runs show in the UI) and prints what was produced.

The parts: :mod:`.parser` (arguments), :mod:`.run_report` (``report``: settings, selection, run,
outcome), :mod:`.staleness` (what is missing or stale), :mod:`.local` (the instance and the runs
this command started), :mod:`.results` (baselines and bundles), :mod:`.repro_command` (``repros``)."""

import argparse
import os
import sys

from ..resources import REPO_ROOT
from ..run_summary import outcome_table
from . import local
from .parser import build_parser
from .repro_command import repro_case, repros
from .results import export_bundle_command, import_bundle_command, merge_bundles_command, promote_baseline
from .run_report import report, report_backends
from .staleness import assets_to_run, latest_evaluations, selection_for, stored_for_profile

# The names the tests of bundles and reproducers use (they predate the split into modules).
_stored_for_profile, _latest_evaluations, _repro_case = stored_for_profile, latest_evaluations, repro_case

__all__ = [
    "REPO_ROOT",
    "assets_to_run",
    "export_bundle_command",
    "import_bundle_command",
    "latest_evaluations",
    "main",
    "outcome_table",
    "promote_baseline",
    "report",
    "report_backends",
    "repro_case",
    "repros",
    "selection_for",
    "stored_for_profile",
]


def _data_dir_problem(command: str, data_dir: str | None) -> str | None:
    """Why a command that reads and writes files under the data folder itself (baselines, bundles,
    reproducers) cannot use ``data_dir``: an object-store data folder holds only the values the IO
    manager stores."""
    from ..storage import default_data_root, is_url

    folder = data_dir or default_data_root()
    if not is_url(folder):
        return None
    return (
        f"{command}: the data folder {folder!r} is a URL; this command needs a local or mounted "
        "folder (--data-dir or FUSION_DATA_DIR set to a path)"
    )


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "repros":
        return repros(
            args.profile,
            args.data_dir,
            args.planted,
            args.make,
            args.python,
            args.backend,
            not args.no_knobs,
            args.device,
        )
    if args.command == "export-bundle":
        return export_bundle_command(args.profile, args.out, args.data_dir, args.no_tensors, args.max_tensor_mib)
    if args.command == "merge-bundles":
        return merge_bundles_command(args.out, args.paths)
    if args.command == "import-bundle":
        return import_bundle_command(args.path, args.data_dir, args.replace, args.if_new)
    if args.command == "promote-baseline":
        return promote_baseline(
            args.profile, args.device, args.backend, args.data_dir, args.allow_partial, args.note, args.include_imported
        )
    raise ValueError(f"no command {args.command!r}")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (the process's arguments when None) and run the subcommand; its exit status."""
    from ..interrupts import terminate_as_interrupt

    terminate_as_interrupt()  # a scheduler's SIGTERM stops a run as Ctrl-C does
    args = build_parser().parse_args(argv)
    if args.command == "times":
        from ..timing import print_times

        return print_times(local.local_instance(), args.profile)
    if args.command == "report":
        only = [s.strip() for s in args.only.split(",") if s.strip()]
        if args.seed is not None:
            os.environ["FUSION_SEED"] = str(args.seed)  # read by ExperimentSettings.seed here and in step processes
        if args.keep_sets:
            os.environ["FUSION_KEEP_SETS"] = "1"  # read by ExperimentSettings.keep_sets here and in step processes
        if args.select:
            from ..experiment import SELECT_ENV
            from .run_report import selection_problem

            selection = " ".join(args.select)
            if (why := selection_problem(selection)) is not None:
                print(f"report: {why}", file=sys.stderr)
                return 2
            os.environ[SELECT_ENV] = selection  # read by the selectable experiments here and in step processes
        if args.backends:
            return report_backends(
                args.profile,
                args.device,
                [b.strip() for b in args.backends.split(",") if b.strip()],
                args.backend_options,
                args.verbose,
                args.everything,
                only,
                args.workloads,
            )
        return report(
            args.profile,
            args.device,
            args.backend,
            args.backend_options,
            args.verbose,
            args.everything,
            only,
            args.workloads,
        )
    why = _data_dir_problem(args.command, args.data_dir) if hasattr(args, "data_dir") else None
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    return _dispatch(args)
