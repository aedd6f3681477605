#!/usr/bin/env bash
# The one test command (also .ci/run): set up like ops/quickstart.sh, make sure Redis and
# PostgreSQL (with the `test` database) are up, then ruff, mypy, the import contracts
# (lint-imports) and the pytest suite.
# Every step runs; the exit code is non-zero if any failed.  Arguments go to pytest.
set -euo pipefail
# shellcheck source=ops/setup_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$ROOT"

ensure_venv
ensure_compose
ensure_redis
ensure_postgres test
export MEMSTRATA_TEST_REDIS_URL="${MEMSTRATA_TEST_REDIS_URL:-$REDIS_URL}"

failed=()
step() {  # step NAME command...
  local name="$1"; shift
  log "$name: $*"
  if "$@"; then log "$name: ok"; else log "$name: FAILED (exit $?)"; failed+=("$name"); fi
}

step ruff "$VENV/bin/ruff" check memstrata core tasks ops tests beat_schedule.py
step mypy "$VENV/bin/mypy"  # targets and strictness: [tool.mypy] in pyproject.toml
step imports "$VENV/bin/lint-imports"

log "pytest: pytest -q tests/ $*"
rc=0
"$VENV/bin/pytest" -q tests/ "$@" || rc=$?
case "$rc" in
  0) log "pytest: ok" ;;
  5) if [ "${MEMSTRATA_ALLOW_NO_TESTS:-0}" = 1 ]; then
       log "pytest: no tests collected (allowed by MEMSTRATA_ALLOW_NO_TESTS=1)"
     else
       log "pytest: FAILED: no tests were collected (exit 5)"; failed+=(pytest)
     fi ;;
  *) log "pytest: FAILED (exit $rc)"; failed+=(pytest) ;;
esac

if [ "${#failed[@]}" -gt 0 ]; then
  log "FAILED: ${failed[*]}"
  exit 1
fi
log "all checks passed"
