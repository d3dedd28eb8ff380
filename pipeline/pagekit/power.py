"""A claim rule's power: the stored table of how often it detects an effect, its loader and its place on a page.

Each experiment may keep a ``power.json`` beside its modules (``pipeline/experiments/<folder>/power.json``)
holding one or more tables, each for the claim checks it names (``asset:check``):

* ``measured``: the rule's own decision code run on simulated data with planted effects. Per sample size
  ``n`` (what ``n`` counts is ``sample_size``), per effect (its ``size`` in the rule's ``unit``, or null for an
  effect with a name only, such as one of B's faults), how many of ``replications`` simulated rows were
  contradicted (detected), inconclusive and supported. Rows marked ``healthy`` plant nothing (or nothing
  material, as E's effects below its margin): their contradicted count is the false alarms. With it: the command
  that measured it, its seeds and date. A rule measured under several conditions at one ``n`` (E's paired noise,
  its sd and its tails) gives each size entry a ``condition`` (its name, unique per ``n``) and optionally a
  numeric ``level``; the table's ``level_key`` names the claim result's entry holding a run's level, and
  ``condition_name``, ``healthy_label`` and ``replication_noun`` word the page's columns and note. A table
  without them is shown as before.
* ``deterministic``: declared, not measured, for a rule of confidence None (bit equality, an exact count, a
  derived bound): ``statement`` says why any difference the rule looks at is detected and a healthy run
  cannot be contradicted.

:func:`power_block` puts a claim's table under its rule on the experiment page, with the smallest effect
detected with at least 80% power at each size; :func:`claims_low_power_note` adds a sentence to the verdict line
when a supported claim's test detects only effects larger than the rule's materiality threshold. A claim may also
store a measured table of its own run's conditions (:data:`RUN_TABLE_KEY`, one table of the same format):
:func:`power_block` shows it after the stored one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..experiment import Experiment
from ..tables import fmt
from ..verdicts import CLAIM, NOT_APPLICABLE
from .render import CheckRecord, Report, collapsed

POWER_TABLE_FORMAT = "fusion-precision/power-table/1"
KINDS = ("measured", "deterministic")
COUNTS = ("contradicted", "inconclusive", "supported")
EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
DETERMINISTIC = "deterministic"  # a rule's confidence as its metadata stores None
#: The claim result's entry that may hold a measured table of the run's own conditions (JSON, one table).
RUN_TABLE_KEY = "power.this_run"
#: A measured table's optional wording and keys, each a string when present.
OPTIONAL_TEXT = ("n_key", "level_key", "condition_name", "healthy_label", "replication_noun")


class PowerTableError(ValueError):
    """A power table that does not have the format: the message names the file, the entry and the problem."""


@dataclass(frozen=True)
class Effect:
    effect: str
    size: float | None  # in the table's unit; None for a named effect (a fault) without one
    healthy: bool  # nothing planted: contradicted is a false alarm
    replications: int
    contradicted: int
    inconclusive: int
    supported: int
    figures: Mapping[str, Any]

    @property
    def rate(self) -> float:
        return self.contradicted / self.replications


@dataclass(frozen=True)
class Size:
    n: int
    effects: tuple[Effect, ...]
    condition: str | None = None  # what else the measurement held fixed at this n (E's noise), None when nothing
    level: float | None = None  # the condition's number, matched against a run's (the table's level_key)


@dataclass(frozen=True)
class PowerTable:
    source: str
    experiment: str
    checks: tuple[str, ...]
    kind: str
    unit: str
    threshold: float | None
    fields: Mapping[str, Any]  # effect, sample_size, simulation, command, date, seeds, scope, statement, ...
    sizes: tuple[Size, ...] = ()
    power: float = 0.8

    def size_for(self, n: int | None, level: float | None = None) -> Size | None:
        """The measured size ``n``, else the nearest one (the largest when ``n`` is unknown); of its conditions,
        those at the level nearest ``level`` (the higher on a tie; all when unknown), and of those the one that
        detects least (the largest smallest-detected effect, none detected counting as the largest)."""
        if not self.sizes:
            return None
        ns = {s.n for s in self.sizes}
        chosen = max(ns) if n is None else min(ns, key=lambda m: (abs(m - n), m))
        at = [s for s in self.sizes if s.n == chosen]
        levels = [s.level for s in at if s.level is not None]
        if level is not None and levels:
            near = min(levels, key=lambda v: (abs(v - level), -v))
            at = [s for s in at if s.level == near]
        return max(at, key=lambda s: _weakness(s, self.power))

    def text(self, key: str, default: str) -> str:
        """The table's wording ``key`` (:data:`OPTIONAL_TEXT`), else ``default``."""
        value = self.fields.get(key)
        return value if isinstance(value, str) and value.strip() else default


def _need(data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise PowerTableError(f"{where}: missing {key!r}")
    value = data[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
        raise PowerTableError(f"{where}: {key!r} must be {_names(kinds)}, not {type(value).__name__} {value!r}")
    return value


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _tuple(kinds))


def _count(data: Mapping[str, Any], key: str, where: str) -> int:
    value = _need(data, key, int, where)
    if value < 0:
        raise PowerTableError(f"{where}: {key!r} must not be negative, got {value}")
    return int(value)


def _effect(data: Any, where: str) -> Effect:
    if not isinstance(data, Mapping):
        raise PowerTableError(f"{where}: an effect must be an object")
    size = data.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, float)) or not math.isfinite(size)):
        raise PowerTableError(f"{where}: 'size' must be a finite number or null, not {size!r}")
    reps = _count(data, "replications", where)
    c, i, s = (_count(data, k, where) for k in COUNTS)
    if reps < 1 or c + i + s != reps:
        raise PowerTableError(
            f"{where}: contradicted + inconclusive + supported = {c + i + s}, not replications {reps}"
        )
    healthy = data.get("healthy", size == 0)
    if not isinstance(healthy, bool):
        raise PowerTableError(f"{where}: 'healthy' must be true or false")
    figures = data.get("figures", {})
    if not isinstance(figures, Mapping):
        raise PowerTableError(f"{where}: 'figures' must be an object")
    name = _need(data, "effect", str, where)
    return Effect(name, None if size is None else float(size), healthy, reps, c, i, s, figures)


def _measured(data: Mapping[str, Any], where: str) -> tuple[Size, ...]:
    for key in ("effect", "sample_size", "command", "date"):
        if not str(_need(data, key, str, where)).strip():
            raise PowerTableError(f"{where}: {key!r} must not be empty")
    _need(data, "seeds", list, where)
    if not isinstance(data.get("n_key", ""), str):
        raise PowerTableError(f"{where}: 'n_key' must name the claim result's entry that holds n")
    for key in OPTIONAL_TEXT:
        if not isinstance(data.get(key, ""), str):
            raise PowerTableError(f"{where}: {key!r} must be a string, not {data[key]!r}")
    sizes = _need(data, "sizes", list, where)
    if not sizes:
        raise PowerTableError(f"{where}: 'sizes' is empty: a measured table needs at least one sample size")
    out: list[Size] = []
    for i, s in enumerate(sizes):
        at = f"{where}.sizes[{i}]"
        if not isinstance(s, Mapping):
            raise PowerTableError(f"{at}: a size must be an object")
        n = _count(s, "n", at)
        effects = _need(s, "effects", list, at)
        if not effects:
            raise PowerTableError(f"{at}: 'effects' is empty")
        condition, level = _condition(s, at)
        if any(o.n == n and o.condition == condition for o in out):
            raise PowerTableError(f"{at}: n {n} with condition {condition!r} is measured twice")
        parsed = tuple(_effect(e, f"{at}.effects[{j}]") for j, e in enumerate(effects))
        out.append(Size(n, parsed, condition, level))
    return tuple(out)


def _condition(data: Mapping[str, Any], where: str) -> tuple[str | None, float | None]:
    condition, level = data.get("condition"), data.get("level")
    if condition is not None and (not isinstance(condition, str) or not condition.strip()):
        raise PowerTableError(f"{where}: 'condition' must be a non-empty string, not {condition!r}")
    if level is not None and (
        isinstance(level, bool) or not isinstance(level, (int, float)) or not math.isfinite(level)
    ):
        raise PowerTableError(f"{where}: 'level' must be a finite number or null, not {level!r}")
    if level is not None and condition is None:
        raise PowerTableError(f"{where}: a 'level' needs the 'condition' it is the level of")
    return condition, None if level is None else float(level)


def _table(data: Any, experiment: str, where: str) -> PowerTable:
    if not isinstance(data, Mapping):
        raise PowerTableError(f"{where}: a table must be an object")
    checks = _need(data, "checks", list, where)
    if not checks or not all(isinstance(c, str) and ":" in c for c in checks):
        raise PowerTableError(f"{where}: 'checks' must list the claim checks it is for, as 'asset:check'")
    kind = _need(data, "kind", str, where)
    if kind not in KINDS:
        raise PowerTableError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, not {kind!r}")
    unit = _need(data, "unit", str, where)
    threshold = data.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise PowerTableError(f"{where}: 'threshold' must be a number or null, not {threshold!r}")
    power = data.get("power", 0.8)
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not 0 < power < 1:
        raise PowerTableError(f"{where}: 'power' must be a number in (0, 1), not {power!r}")
    if kind == DETERMINISTIC:
        if not str(_need(data, "statement", str, where)).strip():
            raise PowerTableError(f"{where}: a deterministic table needs its 'statement'")
        sizes: tuple[Size, ...] = ()
    else:
        sizes = _measured(data, where)
    value = None if threshold is None else float(threshold)
    return PowerTable(where.split(":")[0], experiment, tuple(checks), kind, unit, value, data, sizes, float(power))


def parse_tables(data: Any, source: str) -> list[PowerTable]:
    """The tables of one ``power.json`` (already read as JSON); :class:`PowerTableError` when malformed."""
    if not isinstance(data, Mapping):
        raise PowerTableError(f"{source}: a power file must be a JSON object")
    if data.get("format") != POWER_TABLE_FORMAT:
        raise PowerTableError(f"{source}: 'format' must be {POWER_TABLE_FORMAT!r}, not {data.get('format')!r}")
    experiment = _need(data, "experiment", str, source)
    tables = _need(data, "tables", list, source)
    if not tables:
        raise PowerTableError(f"{source}: 'tables' is empty")
    return [_table(t, experiment, f"{source}: tables[{i}]") for i, t in enumerate(tables)]


def load_power_tables(path: Path) -> list[PowerTable]:
    """The tables of the power file at ``path``; :class:`PowerTableError` when it is not valid JSON or malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise PowerTableError(f"{path}: not valid JSON ({e})") from e
    return parse_tables(data, str(path))


def write_power_tables(path: Path, experiment: str, tables: Sequence[Mapping[str, Any]]) -> None:
    """Store ``tables`` (checked first: a malformed table is never written) as the power file at ``path``."""
    data = {"format": POWER_TABLE_FORMAT, "experiment": experiment, "tables": list(tables)}
    parse_tables(data, str(path))
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def show_power_tables(experiment: str, tables: Sequence[Mapping[str, Any]], write_to: Path | None = None) -> None:
    """Print each table as its claim's page shows it (checked by the parser the report uses), then, with
    ``write_to``, store them there: a rule-power script's last step."""
    data = {"format": POWER_TABLE_FORMAT, "experiment": experiment, "tables": list(tables)}
    for table in parse_tables(data, f"{experiment}'s measured tables"):
        print(render_table(table))
    if write_to is not None:
        write_power_tables(write_to, experiment, tables)
        print(f"wrote {write_to}")


@cache
def _index(root: Path) -> dict[str, PowerTable]:
    index: dict[str, PowerTable] = {}
    for path in sorted(root.glob("*/power.json")):
        for table in load_power_tables(path):
            for check in table.checks:
                if check in index:
                    raise PowerTableError(f"{path}: {check} already has a table in {index[check].source}")
                index[check] = table
    return index


def table_for(check_key: str, root: Path = EXPERIMENTS_DIR) -> PowerTable | None:
    """The stored power table of the claim check ``asset:check`` (None when it has none)."""
    return _index(Path(root)).get(check_key)


# --- figures ------------------------------------------------------------------------------------


def smallest_detected(size: Size, power: float = 0.8) -> float | None:
    """The smallest planted effect from which on every larger measured one is detected (contradicted) in at
    least ``power`` of its replications; None when the largest measured effect is not."""
    sized = sorted((e for e in size.effects if e.size is not None and not e.healthy), key=lambda e: e.size or 0.0)
    found = None
    for e in reversed(sized):
        if e.rate < power:
            break
        found = e.size
    return found


def _weakness(size: Size, power: float) -> float:
    x = smallest_detected(size, power)
    return math.inf if x is None else x


def false_alarms(size: Size) -> tuple[int, int]:
    """Contradicted and replications summed over the rows that plant nothing."""
    healthy = [e for e in size.effects if e.healthy]
    return sum(e.contradicted for e in healthy), sum(e.replications for e in healthy)


def _md(rows: Sequence[Mapping[str, Any]]) -> str:
    """Every row as a Markdown table (the columns of every row, in order of appearance; missing cells empty)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r[k]) if k in r else "" for k in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _ranges(values: Sequence[Any]) -> str:
    """Seeds as text, consecutive integers as one range: ``0-199``, ``0, 1, 2`` stays as it is below four."""
    parts: list[str] = []
    run: list[int] = []
    for v in [*values, None]:
        if isinstance(v, int) and run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 3 else ", ".join(map(str, run)))
        run = [v] if isinstance(v, int) else []
        if v is not None and not isinstance(v, int):
            parts.append(str(v))
    return ", ".join(parts)


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({count / total:.1%})" if total else "—"


def _size_text(value: float | None, unit: str) -> str:
    return "—" if value is None else f"{value:g} {unit}"


def _measured_body(table: PowerTable) -> str:
    f = table.fields
    paragraphs = [
        f"**Planted effect:** {f['effect']}. **Sample size n:** {f['sample_size']}.",
        f"**Simulation:** {f['simulation']}." if f.get("simulation") else "",
        f"**What was measured:** {f['scope']}." if f.get("scope") else "",
    ]
    lines = [x for p in paragraphs if p for x in (p, "")]
    summary = []
    alarms_title = f"false alarms ({table.text('healthy_label', 'no effect')})"
    for s in table.sizes:
        x = smallest_detected(s, table.power)
        alarms, total = false_alarms(s)
        detected = _size_text(x, table.unit) if x is not None else "none of the measured effects"
        named = all(e.size is None for e in s.effects if not e.healthy)
        smallest = "not defined (named effects)" if named else detected
        summary.append(
            {**_where(table, s), f"smallest effect detected with ≥ {table.power:.0%} power": smallest}
            | {alarms_title: _share(alarms, total)}
        )
    lines.append(_md(summary))
    rows = [
        {
            **_where(table, s),
            "effect": e.effect + (" (healthy)" if e.healthy else ""),
            f"size ({table.unit})": e.size,
            "contradicted (detected)": _share(e.contradicted, e.replications),
            "inconclusive": e.inconclusive,
            "supported": e.supported,
            **({"figures": "; ".join(f"{k}: {fmt(v)}" for k, v in e.figures.items())} if e.figures else {}),
        }
        for s in table.sizes
        for e in s.effects
    ]
    lines += ["", _md(rows), ""]
    seeds = _ranges(f.get("seeds", []))
    lines.append(f"Measured {f['date']} by `{f['command']}` (seeds {seeds}).")
    return "\n".join(lines)


def _where(table: PowerTable, size: Size) -> dict[str, Any]:
    """A row's first cells: its n, and its condition where the table has conditions."""
    if all(s.condition is None for s in table.sizes):
        return {"n": size.n}
    return {"n": size.n, table.text("condition_name", "condition"): size.condition or ""}


def render_table(table: PowerTable, title: str | None = None) -> str:
    """The table as a page shows it: collapsed, the 80%-power effect per size first, then every count; titled
    ``title`` when given (the measured table of a run's own conditions), else as the rule's stored table."""
    if table.kind == DETERMINISTIC:
        detects = table.fields.get("detects") or "any difference of one bit/ULP in what it compares"
        body = (
            f"This rule is deterministic (confidence None): {table.fields['statement']} It detects {detects} "
            "(detection rate 1), and a false alarm is 0 by construction. Declared, not measured: there is nothing "
            "to simulate."
        )
        return collapsed("Power of this rule: by construction (deterministic)", body, kind="info")
    reps = sorted({e.replications for s in table.sizes for e in s.effects})
    cells = f"{'/'.join(map(str, reps))} replications per cell, {table.fields['date']}"
    return collapsed(f"{title or 'Measured power of this rule'} ({cells})", _measured_body(table), kind="info")


def _is_deterministic(c: CheckRecord) -> bool:
    return c.spec_metadata.get("rule.confidence", c.metadata.get("rule.confidence")) == DETERMINISTIC


def run_table(c: CheckRecord) -> PowerTable | None:
    """The measured table of the run's own conditions the claim stored (:data:`RUN_TABLE_KEY`), None when it
    stored none; :class:`PowerTableError` when it is malformed."""
    value = c.metadata.get(RUN_TABLE_KEY)
    if value is None or value == "":
        return None
    where = f"{c.key}: {RUN_TABLE_KEY}"
    try:
        data = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError as e:
        raise PowerTableError(f"{where}: not valid JSON ({e})") from e
    table = _table(data, "", where)
    if table.kind == DETERMINISTIC:
        raise PowerTableError(f"{where}: a run's own table is measured, not declared")
    return table


def power_block(c: CheckRecord, root: Path = EXPERIMENTS_DIR) -> str:
    """The claim's stored power table under its rule ('' when it has none, or when a deterministic declaration
    is stored for a rule that states a confidence: only a rule of confidence None is powerful by construction),
    then the table the claim measured at its own run's conditions, if it stored one."""
    blocks = []
    table = table_for(c.key, root)
    if table is not None and (table.kind == DETERMINISTIC) == _is_deterministic(c):
        blocks.append(render_table(table))
    try:
        own = run_table(c)
    except PowerTableError as e:
        blocks.append(f"The power this run measured could not be read: {e}\n")
    else:
        if own is not None:
            blocks.append(render_table(own, "Power measured at this run's own conditions"))
    return "".join(b + "\n" for b in blocks)


def _number(c: CheckRecord, key: Any) -> float | None:
    value = c.metadata.get(key) if isinstance(key, str) and key else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def _row_n(c: CheckRecord, table: PowerTable) -> int | None:
    value = _number(c, table.fields.get("n_key"))
    return None if value is None else int(value)


def _threshold(c: CheckRecord, table: PowerTable) -> float | None:
    value = c.spec_metadata.get("rule.threshold", c.metadata.get("rule.threshold"))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else table.threshold


def claim_note(c: CheckRecord, root: Path = EXPERIMENTS_DIR) -> str:
    """For a supported claim whose stored power table says its test detects with the table's power only effects
    larger than the rule's materiality threshold (at the row's sample size): that, in words; '' otherwise."""
    table = table_for(c.key, root)
    if c.label != "supported" or table is None or table.kind == DETERMINISTIC:
        return ""
    n, level = _row_n(c, table), _number(c, table.fields.get("level_key"))
    size = table.size_for(n, level)
    threshold = _threshold(c, table)
    if size is None or threshold is None or all(e.size is None for e in size.effects if not e.healthy):
        return ""
    x = smallest_detected(size, table.power)
    if x is not None and x <= threshold:
        return ""
    unit, share = table.unit, f"{table.power:.0%}"
    where = f"n = {size.n}" + ("" if n is None or n == size.n else f", nearest measured to this run's {n}")
    if size.condition is not None:
        where += f"; {table.text('condition_name', 'condition')} {size.condition}"
        if level is not None and size.level is not None and level != size.level:
            where += f", nearest measured to this run's {level:.3g}"
    detects = f"effects of ≥ {x:g} {unit}" if x is not None else "none of the measured effects"
    text = f"`{c.name}` is supported, but this test detects only {detects} with {share} power ({where})"
    between = [e for e in size.effects if e.size is not None and threshold < e.size and (x is None or e.size < x)]
    if between:
        e = max(between, key=lambda e: (e.size or 0.0, -e.rate))  # of effects of one size, the least detected
        shared = any(o.size == e.size and o is not e for o in size.effects)
        planted = e.effect if shared else f"{e.size:g} {unit}"
        text += (
            f"; smaller ones could pass: a planted {planted} was detected in {e.contradicted} of "
            f"{e.replications} simulated {table.text('replication_noun', 'rows')}, supported in {e.supported}"
        )
    else:
        text += "; smaller ones could pass"
    return text + f" (materiality {threshold:g} {unit})."


def claims_low_power_note(claims: Iterable[CheckRecord], root: Path = EXPERIMENTS_DIR) -> str:
    """The verdict line's low-power sentences, one per supported claim it applies to ('' when none), each
    starting with a space so it can follow the line's text."""
    notes = [claim_note(c, root) for c in claims]
    return "".join(f" **Low power:** {n}" for n in notes if n)


def verdict_note(report: Report, exp: Experiment, root: Path = EXPERIMENTS_DIR) -> str:
    """:func:`claims_low_power_note` for the experiment's verdict line: only where its claims were judged (a failed,
    invalid, not applicable or unrun experiment has no verdict to qualify)."""
    if exp.group in report.failed or not report.shows(exp.group):
        return ""
    o = report.outcome(exp.group)
    if o is None or o.validity in ("invalid", NOT_APPLICABLE):
        return ""
    return claims_low_power_note((c for c in report.checks_of(exp.group) if c.outcome == CLAIM), root)
