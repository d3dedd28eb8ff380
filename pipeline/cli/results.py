"""``promote-baseline``, ``export-bundle``, ``import-bundle``: a profile's stored results as a
baseline version, as a portable bundle, and a bundle recorded beside the local results."""

import sys

from . import local


def promote_baseline(
    profile: str,
    device: str,
    backend: str,
    data_dir: str | None,
    allow_partial: bool,
    note: str,
    include_imported: bool = False,
) -> int:
    """Promote ``<data>/<profile>`` to a new baseline version (provenance from the local instance's
    events: only those made here, unless ``include_imported``)."""
    from ..instruments.regression.baseline import BaselineError
    from ..instruments.regression.drift import promote_with_instance
    from ..resources import ExperimentSettings
    from ..storage import default_data_root

    base_dir = data_dir or default_data_root()
    settings = ExperimentSettings(profile=profile, device=device, backend=backend)
    try:
        done = promote_with_instance(
            local.local_instance(),
            base_dir,
            settings,
            allow_partial=allow_partial,
            note=note,
            include_imported=include_imported,
        )
    except BaselineError as exc:
        print(f"promote-baseline: {exc}", file=sys.stderr)
        return 2
    print(f"promoted {', '.join(done.promoted)} of profile {profile} as baseline {done.version} -> {done.folder}")
    if done.not_applicable:
        print("left out by design: " + "; ".join(f"{e} ({why})" for e, why in done.not_applicable.items()))
    if done.skipped:
        print("not materialized (left out): " + "; ".join(f"{e}: {', '.join(m)}" for e, m in done.skipped.items()))
    print(f"previous baseline: {done.previous or 'none'} (kept)")
    return 0


def export_bundle_command(profile: str, out: str, data_dir: str | None, no_tensors: bool, max_tensor_mib: float) -> int:
    """Write this instance's results of ``profile`` as a portable bundle folder."""
    from ..bundle import BundleError
    from ..bundle import export_bundle as export
    from ..definitions import defs
    from ..storage import default_data_root

    base_dir = data_dir or default_data_root()
    try:
        done = export(
            local.local_instance(),
            defs.resolve_asset_graph(),
            base_dir,
            profile,
            out,
            include_tensors=not no_tensors,
            max_tensor_bytes=int(max_tensor_mib * 2**20),
        )
    except BundleError as exc:
        print(f"export-bundle: {exc}", file=sys.stderr)
        return 2
    print(f"bundle {done.folder}: {done.assets} materializations, {done.checks} check evaluations, {done.files} files")
    if done.left_out:
        print("left out (tensors over the cap): " + "; ".join(f"{a} ({why})" for a, why in done.left_out.items()))
    return 0


def import_bundle_command(path: str, data_dir: str | None, replace: bool, if_new: bool = False) -> int:
    """Check a bundle and record its results in this instance, next to (never over) local ones;
    ``if_new``: a bundle whose device and profile were imported before is passed over with one line."""
    from ..bundle import BundleError, import_target
    from ..bundle import import_bundle as load
    from ..definitions import defs
    from ..storage import default_data_root

    base_dir = data_dir or default_data_root()
    try:
        if if_new and not replace and (before := import_target(path, base_dir)).exists():
            print(f"import-bundle: {path} already imported ({before})")
            return 0
        done = load(local.local_instance(), path, base_dir, defs.resolve_asset_graph(), replace=replace)
    except BundleError as exc:
        print(f"import-bundle: {exc}", file=sys.stderr)
        return 2
    print(
        f"imported {done.assets} materializations and {done.checks} check evaluations of {done.device!r} "
        f"(profile {done.profile}) -> {done.folder}; re-materialize report_site to show them"
    )
    for warning in done.warnings:
        print(f"import-bundle: warning: {warning}", file=sys.stderr)
    return 0


def merge_bundles_command(out: str, paths: list[str]) -> int:
    """Write one bundle from several of one device and profile (the newest bundle's asset wins)."""
    from pathlib import Path

    from ..bundle import NOTES, BundleError
    from ..bundle_merge import merge_bundles as merge

    try:
        done = merge(paths, out)
    except BundleError as exc:
        print(f"merge-bundles: {exc}", file=sys.stderr)
        return 2
    print(f"bundle {done.folder}: {done.assets} materializations, {done.checks} check evaluations, {done.files} files")
    noted = [p for p in paths if (Path(p) / NOTES).is_file()]
    if noted:
        print(f"merge-bundles: {NOTES} of {', '.join(noted)} not carried over; write one for {out} by hand")
    return 0
