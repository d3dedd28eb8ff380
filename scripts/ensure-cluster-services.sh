#!/usr/bin/env bash
# Install the servers `make test-cluster` starts (Debian's redis-server and PostgreSQL), when they
# are missing and this machine can install them. Never fails by itself: without a server the
# cluster tests that need it skip and say which one is missing.
set -u
have_postgres() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
}
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
have_postgres || missing+=(postgresql)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} for the cluster tests (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}") \
    >/dev/null 2>&1 || echo "could not install ${missing[*]}; the cluster tests that need them will be skipped"
else
  echo "${missing[*]} not found and cannot be installed here (not root or no apt-get); the cluster tests that need them will be skipped"
fi
exit 0
