"""Backends offered on demand: a fresh process registers one from the ``module:function`` its parent
names, so the code that starts it (A's worker) need not import whoever offered it."""

import subprocess
import sys

import pytest

from pipeline import backends

CALLS: list[str] = []


def _register_fake() -> None:
    CALLS.append("registered")


def test_registrar_names_the_offering_function_and_register_by_calls_it(monkeypatch):
    monkeypatch.setattr(backends, "_OFFERED", {})
    backends.offer(["fake_backend"], _register_fake)
    spec = backends.registrar("fake_backend")
    assert spec == f"{__name__}:_register_fake"
    assert backends.registrar("inductor") is None  # built in: nothing to register
    CALLS.clear()
    backends.register_by(spec)
    assert CALLS == ["registered"]
    for bad in ("no_colon", ":f", "mod:", "mod:Class.method"):
        with pytest.raises(ValueError, match="module:function"):
            backends.register_by(bad)


def test_a_fresh_process_registers_a_planted_backend_from_its_registrar():
    import pipeline.experiments  # noqa: F401 - the registry makes the offers, as the CLI and the code location do

    name = sorted(backends.offered())[0]
    spec = backends.registrar(name)
    assert spec == "pipeline.instruments.regression:_register_planted"
    code = (
        "from torch._dynamo import list_backends\nfrom pipeline import backends\n"
        f"assert {name!r} not in list_backends(exclude_tags=())\n"
        f"backends.register_by({spec!r})\n"
        f"print({name!r} in list_backends(exclude_tags=()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True"]
