"""The command line's arguments: one parser per subcommand."""

import argparse

from ..profiles import profiles_help

DATA_DIR_HELP = "data root (default: FUSION_DATA_DIR or ./data)"
BACKEND_HELP = (
    "compiler of the fused path: an adapter's name (inductor, openvino, iree, or one installed through the "
    "fusion_precision.backends entry point) or a torch.compile backend by registered name (aot_eager, eager, "
    "a planted-bug backend); an unknown name is refused with the list of registered ones, a compiler that is "
    "not installed with the command that installs it (default: inductor)"
)


def device_help(what: str = "compute device of every experiment") -> str:
    """``--device``'s help: what it sets and the devices this machine has (``auto``: the first accelerator)."""
    from ..resources import device_choices

    here = ", ".join(d for d in device_choices() if d != "auto")
    return (
        f"{what}: auto (the first accelerator present, else cpu) or a device this machine has: {here} (default: auto)"
    )


def profile_help() -> str:
    """``--profile``'s help: the profiles with what each is for and its budget, and the default."""
    return f"experiment sizes and time budget, {profiles_help()} (default: default)"


def profile_arg(value: str) -> str:
    """``--profile`` of the commands that build no settings: refused with the settings' own message."""
    from ..resources import profile_problem

    why = profile_problem(value)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return value


def _profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="default", type=profile_arg, help=profile_help())


def _add_report(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rep = sub.add_parser("report", help="materialize every asset and run every check")
    # Checked with the other settings (one line naming every problem), not by argparse.
    rep.add_argument("--profile", default="default", help=profile_help())
    rep.add_argument("--device", default="auto", help=device_help())
    rep.add_argument("--backend", default="inductor", help=BACKEND_HELP)
    rep.add_argument(
        "--backends",
        default="",
        help="comma list of compilers (e.g. inductor,openvino,iree): run the plan with each in turn, S's "
        "pools and references made once and reused, then build the site once and print each compiler's wall "
        "time; overrides --backend (default: none, --backend alone)",
    )
    rep.add_argument(
        "--backend-options",
        default="{}",
        help="JSON object of compiler options for the fused path, e.g. '{\"emulate_precision_casts\": true}' "
        "(default: {}, none)",
    )
    rep.add_argument(
        "--all",
        dest="everything",
        action="store_true",
        help="materialize every asset, not only those missing or stale for the profile (default: off)",
    )
    rep.add_argument(
        "--verbose",
        action="store_true",
        help="Dagster's full console log (DEBUG) instead of progress lines (default: off)",
    )
    rep.add_argument(
        "--only",
        default="",
        help="comma list of experiment ids (e.g. M or B,D): materialize those, what they need upstream and the "
        "report; the site marks the others as not run (default: every experiment)",
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
        "where read (gpu, seed); same as FUSION_KEEP_SETS=1 (default: off, the profile's choice)",
    )
    rep.add_argument(
        "--workloads",
        default=None,
        help="your own workloads for experiment M: module:NAME, comma separated (default: $FUSION_WORKLOADS, "
        "else none)",
    )
    rep.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="ID:NAME,...",
        help="narrow an experiment that runs in parts to some of them, e.g. B:softmax or D:transpose_concat "
        "(B's chains, D's subgraphs; repeat for several experiments): a quick check of a compiler, whose "
        "claims on the parts left out are inconclusive; values made under another selection are stale "
        "(default: $FUSION_SELECT, else every part)",
    )


def _add_results(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    pro = sub.add_parser("promote-baseline", help="mark the stored materialization as the baseline (new version)")
    _profile(pro)
    pro.add_argument(
        "--device",
        default="auto",
        help=device_help("the device recorded as provenance where no materialization event has it"),
    )
    pro.add_argument(
        "--backend",
        default="inductor",
        help="the torch.compile backend recorded as provenance where no materialization event has it "
        "(default: inductor)",
    )
    pro.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    pro.add_argument(
        "--allow-partial",
        action="store_true",
        help="promote even if some experiment is not materialized (default: off, refused)",
    )
    pro.add_argument(
        "--include-imported",
        action="store_true",
        help="also take provenance from materializations imported from results bundles (another machine's) "
        "(default: off)",
    )
    pro.add_argument("--note", default="", help="free text stored in the manifest (default: none)")
    exp = sub.add_parser("export-bundle", help="write a profile's results as a portable bundle (for another checkout)")
    _profile(exp)
    exp.add_argument("--out", required=True, help="new folder for the bundle, e.g. results/h100-seed (required)")
    exp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    exp.add_argument(
        "--no-tensors",
        action="store_true",
        help="leave every tensor file out (tables and records only) (default: off, tensors up to --max-tensor-mib)",
    )
    exp.add_argument(
        "--max-tensor-mib", type=float, default=8.0, help="leave out tensor files larger than this, in MiB (default: 8)"
    )
    mrg = sub.add_parser(
        "merge-bundles",
        help="one bundle from several of one device and profile (each asset from the newest bundle holding it)",
    )
    mrg.add_argument("--out", required=True, help="new folder for the merged bundle (required)")
    mrg.add_argument("paths", nargs="+", help="the bundle folders (two or more)")
    imp = sub.add_parser("import-bundle", help="check a results bundle and add it to this instance and data folder")
    imp.add_argument("path", help="the bundle folder")
    imp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    imp.add_argument(
        "--replace",
        action="store_true",
        help="replace an earlier import of the same device and profile (default: off, such an import is refused)",
    )
    imp.add_argument(
        "--if-new",
        action="store_true",
        help="pass over (exit 0) a device and profile imported before (default: off, such an import is refused)",
    )


def _add_repros(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    rp = sub.add_parser(
        "repros",
        help="build minimal reproducers (bisected to the layer at fault) and list every reproducer with its status",
    )
    _profile(rp)
    rp.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    rp.add_argument(
        "--planted",
        nargs="*",
        default=None,
        metavar="BUG",
        help="build reproducers of these planted bugs of the regression matrix (the option alone: all of them; "
        "default: none)",
    )
    rp.add_argument(
        "--make",
        action="append",
        default=[],
        metavar="SPEC",
        help="build a reproducer of this case: d/<subgraph>/<dtype>/<BxSxH>/<layout> (a row of D, e.g. "
        "d/transpose_concat/float16/4x128x256/contiguous) "
        "or fuzz/<seed>[/<dtype>] or difftest/<generator>/<seed>[/<dtype>]; repeatable (default: none)",
    )
    rp.add_argument(
        "--backend", default="inductor", help="torch.compile backend of the --make cases (default: inductor)"
    )
    rp.add_argument("--device", default="auto", help=device_help("device of the --make cases"))
    rp.add_argument(
        "--python",
        default=None,
        help="re-run every reproducer under this interpreter (another torch) (default: this interpreter)",
    )
    rp.add_argument(
        "--no-knobs",
        action="store_true",
        help="bisect the layers only, no Inductor knobs and no toolchain (default: off, all of them)",
    )


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
