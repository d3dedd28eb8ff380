#!/usr/bin/env bash
# Re-run the tests marked isa_sensitive under every ATen CPU capability this CPU can run below its
# own (the main run already used the native one): DEFAULT on any x86-64 CPU, AVX2 where the CPU has
# it and AVX-512 is native. Each run gets its own Inductor cache, since Inductor's cache key does not
# include the capability. A failure names the capability it failed under and fails the build.
set -euo pipefail
PY=${PY:-.venv/bin/python}
native=$($PY -c 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())')
case "$native" in
  avx512) below="default avx2" ;;
  avx2) below="default" ;;
  *) below="" ;;
esac
# Only the files that hold such tests are collected (collecting the whole suite takes a minute).
files=$(grep -rl --include='test_*.py' 'mark.isa_sensitive' tests || true)
if [ -z "$files" ]; then
  echo "no test is marked isa_sensitive"
  exit 0
fi
echo "ISA-sensitive tests: native capability $native; re-running under: ${below:-nothing below it}"
for cap in $below; do
  cache=$(mktemp -d)
  echo "== ATEN_CPU_CAPABILITY=$cap"
  status=0
  ATEN_CPU_CAPABILITY=$cap TORCHINDUCTOR_CACHE_DIR=$cache \
    $PY -m pytest -q -p no:cacheprovider -m "isa_sensitive and not heavy and not cluster" $files || status=$?
  rm -rf "$cache"
  if ((status != 0)); then
    echo "ISA-sensitive tests failed under ATEN_CPU_CAPABILITY=$cap"
    exit "$status"
  fi
done
