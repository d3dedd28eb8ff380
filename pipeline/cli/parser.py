"""The command line's arguments: one parser per subcommand."""

import argparse

from ..profiles import profiles_help

DATA_DIR_HELP = "data root (default: FUSION_DATA_DIR or ./data)"


def profile_arg(value: str) -> str:
    """``--profile`` of the commands that build no settings: refused with the settings' own message."""
    from ..resources import profile_problem

    why = profile_problem(value)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return value


def _profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="default", type=profile_arg, help=profiles_help())


def _add_report(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rep = sub.add_parser("report", help="materialize every asset and run every check")
    # Checked with the other settings (one line naming every problem), not by argparse.
    rep.add_argument("--profile", default="default", help=profiles_help())
    rep.add_argument("--device", default="auto")
    rep.add_argument("--backend", default="inductor")
    rep.add_argument("--backend-options", default="{}", help="JSON object of compiler options")
    rep.add_argument(
        "--all",
        dest="everything",
        action="store_true",
        help="materialize every asset, not only those missing or stale for the profile",
    )
    rep.add_argument(
        "--verbose", action="store_true", help="Dagster's full console log (DEBUG) instead of progress lines"
    )
    rep.add_argument(
        "--only",
        default="",
        help="comma list of experiment ids (e.g. M or B,D): materialize those, what they need upstream and the "
        "report; the site marks the others as not run",
    )
    rep.add_argument(
        "--seed",
        type=int,
        default=None,
        help="base seed of every input pool (default: $FUSION_SEED, else 20241223); results stored under "
        "another seed are stale for this one and are made again",
    )
    rep.add_argument(
        "--keep-sets",
        action="store_true",
        help="store S's input pools and fp64 references even where the profile regenerates them on the device "
        "where read (gpu, seed); same as FUSION_KEEP_SETS=1",
    )
    rep.add_argument(
        "--workloads",
        default=None,
        help="your own workloads for experiment M: module:NAME, comma separated (default: $FUSION_WORKLOADS)",
    )


def _add_results(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    pro = sub.add_parser("promote-baseline", help="mark the stored materialization as the baseline (new version)")
    _profile(pro)
    pro.add_argument("--device", default="auto", help="recorded as provenance where no materialization event has it")
    pro.add_argument(
        "--backend", default="inductor", help="recorded as provenance where no materialization event has it"
    )
    pro.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    pro.add_argument("--allow-partial", action="store_true", help="promote even if some experiment is not materialized")
    pro.add_argument(
        "--include-imported",
        action="store_true",
        help="also take provenance from materializations imported from results bundles (another machine's)",
    )
    pro.add_argument("--note", default="", help="free text stored in the manifest")
    exp = sub.add_parser("export-bundle", help="write a profile's results as a portable bundle (for another checkout)")
    _profile(exp)
    exp.add_argument("--out", required=True, help="new folder for the bundle, e.g. results/h100-seed")
    exp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    exp.add_argument("--no-tensors", action="store_true", help="leave every tensor file out (tables and records only)")
    exp.add_argument("--max-tensor-mib", type=float, default=8.0, help="leave out tensor files larger than this")
    mrg = sub.add_parser(
        "merge-bundles",
        help="one bundle from several of one device and profile (each asset from the newest bundle holding it)",
    )
    mrg.add_argument("--out", required=True, help="new folder for the merged bundle")
    mrg.add_argument("paths", nargs="+", help="the bundle folders (two or more)")
    imp = sub.add_parser("import-bundle", help="check a results bundle and add it to this instance and data folder")
    imp.add_argument("path", help="the bundle folder")
    imp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    imp.add_argument("--replace", action="store_true", help="replace an earlier import of the same device and profile")
    imp.add_argument("--if-new", action="store_true", help="pass over (exit 0) a device and profile imported before")


def _add_repros(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rp = sub.add_parser(
        "repros",
        help="build minimal reproducers (bisected to the layer at fault) and list every reproducer with its status",
    )
    _profile(rp)
    rp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    rp.add_argument(
        "--planted", nargs="*", default=None, metavar="BUG", help="planted bugs of the matrix (none named: all of them)"
    )
    rp.add_argument(
        "--make",
        action="append",
        default=[],
        metavar="SPEC",
        help="d/<subgraph>/<dtype>/<BxSxH>/<layout> (a row of D, e.g. d/transpose_concat/float16/4x128x256/contiguous) "
        "or fuzz/<seed>[/<dtype>] or difftest/<generator>/<seed>[/<dtype>]; repeatable",
    )
    rp.add_argument("--backend", default="inductor", help="backend of the --make cases")
    rp.add_argument("--device", default="auto", help="device of the --make cases (auto: the accelerator if any)")
    rp.add_argument("--python", default=None, help="re-run every reproducer under this interpreter (another torch)")
    rp.add_argument("--no-knobs", action="store_true", help="bisect the layers only (no Inductor knobs, no toolchain)")


def build_parser() -> argparse.ArgumentParser:
    """``python -m pipeline.cli`` with its subcommands: report, promote-baseline, export-bundle,
    merge-bundles, import-bundle, repros, times."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_report(sub)
    _add_results(sub)
    _add_repros(sub)
    tim = sub.add_parser("times", help="where the time of a profile's last run went, against its budget")
    _profile(tim)
    return parser
