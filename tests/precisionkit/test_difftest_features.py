"""Pattern budgets: every feature of the tester's vocabulary appears in at least 1 % of a campaign's
programs (10 per 1000), so a campaign of a few hundred programs reaches each one. Generating compiles
nothing: this reads the first 1000 programs of the CPU and GPU plans."""

from precisionkit.difftest.features import FROM_MESSAGE, GPU_ONLY, OPT_IN, VOCABULARY, feature_frequencies

PER_1000 = 10  # 1 % of programs


def test_every_listed_feature_appears_in_one_percent_of_programs():
    cpu, gpu = feature_frequencies(1000, "cpu"), feature_frequencies(1000, "cuda")
    assert set(cpu) == set(gpu) == VOCABULARY and len(cpu) >= 30
    listed = set(cpu) - FROM_MESSAGE - OPT_IN
    rare_cpu = {f: v for f, v in cpu.items() if f in listed - GPU_ONLY and v < PER_1000}
    rare_gpu = {f: v for f, v in gpu.items() if f in listed and v < PER_1000}
    assert not rare_cpu and not rare_gpu, (rare_cpu, rare_gpu)
    # The GPU vocabulary is the GPU plan's alone; what is read from a message never shows before a run.
    assert all(cpu[f] == 0 and gpu[f] >= PER_1000 for f in GPU_ONLY)
    assert all(cpu[f] == gpu[f] == 0 for f in FROM_MESSAGE)
