"""The instruments: what judges the experiments rather than the compiler's numerics alone.

* :mod:`.regression`: drift of every experiment's stored values against the promoted baseline, and the
  planted-bug matrix that shows the experiments' checks catch silent bugs;
* :mod:`.diagnostics`: the per-layer divergence locator, the graph fuzzer, the differential tester,
  reproducers bisected to the layer at fault, and the measured tolerance table.

An instrument may read any experiment (its spec, its stored values, its registry record); no
experiment imports an instrument or another experiment (tests/pipeline/test_import_graph.py). Each
instrument is registered beside the experiments (:mod:`pipeline.experiments`), so it has its asset
group, its checks and its page like them.
"""
