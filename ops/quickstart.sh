#!/usr/bin/env bash
# The one command that sets up and runs memstrata's main job on this machine:
#   virtualenv + `pip install -e .[dev]`, Redis and PostgreSQL reachable at the configured
#   URLs (local ones started from the Debian packages when nothing answers), a Flower
#   password (var/flower-password unless MEMSTRATA_FLOWER_PASSWORD is set), then
#   `memstrata up`: worker + Beat + Flower, the bundled demo, and the services in the
#   foreground until Ctrl-C.  Flags go to `memstrata up`, e.g. --exit-after-demo.
set -euo pipefail
# shellcheck source=ops/setup_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup_env.sh"
cd "$ROOT"

ensure_venv
ensure_redis
# shellcheck disable=SC2119  # (no extra databases here)
ensure_postgres
ensure_flower_password

log "the memstrata command is $VENV/bin/memstrata; to have it on PATH in your shell:"
log "    source $VENV/bin/activate        (or: export PATH=\"$VENV/bin:\$PATH\")"
log "memstrata up $*"
exec "$VENV/bin/memstrata" up "$@"
