# shellcheck shell=bash
# Shared set-up for ops/quickstart.sh and ops/run_tests.sh (sourced, not run):
#   ensure_venv      .venv with `pip install -e .[dev]` (re-run when pyproject.toml changes)
#   ensure_compose   docker-compose (Debian) unless `docker compose` works (config checks)
#   ensure_redis     Redis answering at MEMSTRATA_REDIS_URL, else a local redis-server
#   ensure_postgres  PostgreSQL answering at MEMSTRATA_POSTGRES_URL, else a local cluster;
#                    then the URL's database (and any named as arguments) is created
# A local server is only started for a local address (127.0.0.1, localhost, ::1), from
# the Debian packages, installed with apt-get when missing.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MEMSTRATA_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
REDIS_URL="${MEMSTRATA_REDIS_URL:-redis://127.0.0.1:6379/0}"
PG_URL="${MEMSTRATA_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/memstrata}"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "root needed for: $*"
  fi
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install $* yourself"
  log "installing $* (apt-get)"
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends)
  if ! as_root "${apt[@]}" "$@" >&2; then
    as_root apt-get update -q >&2
    as_root "${apt[@]}" "$@" >&2
  fi
}

is_local() { case "$1" in 127.0.0.1|localhost|::1|0.0.0.0) return 0 ;; *) return 1 ;; esac; }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_until() {  # wait_until SECONDS command...: poll every 0.25 s
  local deadline=$((SECONDS + $1)); shift
  until "$@" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.25
  done
}

pick_python() {
  local c
  for c in "${MEMSTRATA_PYTHON:-}" python3.11 python3.12 python3 python; do
    if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 \
       && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$c"; return
    fi
  done
  apt_install python3 python3-venv
  echo python3
}

ensure_venv() {
  if [ ! -x "$PY" ]; then
    local py; py="$(pick_python)"
    log "creating virtualenv $VENV ($("$py" --version 2>&1))"
    if ! "$py" -m venv "$VENV" >&2; then  # Debian ships venv's ensurepip separately
      rm -rf "$VENV"
      apt_install python3-venv
      "$py" -m venv "$VENV" >&2
    fi
  fi
  local stamp="$VENV/.memstrata-install" want
  want="$( (cat "$ROOT/pyproject.toml"; cd "$ROOT" && find core tasks ops -name __init__.py | sort) \
           | sha1sum | cut -d' ' -f1)"
  if [ "${MEMSTRATA_FORCE_INSTALL:-0}" = 1 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    local pip_log="$ROOT/var/log/pip-install.log"
    mkdir -p "$ROOT/var/log"
    log "pip install -e .[dev] into $VENV (log: var/log/pip-install.log)"
    if ! { "$PY" -m pip install --disable-pip-version-check --upgrade pip \
           && "$PY" -m pip install --disable-pip-version-check -e "${ROOT}[dev]"; } >"$pip_log" 2>&1
    then
      tail -n 30 "$pip_log" >&2
      die "pip install failed; the whole log is in $pip_log"
    fi
    echo "$want" > "$stamp"
  else
    log "virtualenv $VENV is up to date"
  fi
}

ensure_compose() {  # docker-compose (v1, Debian) unless `docker compose` (v2) works: the
  # test command validates the compose files with `config`; no Docker engine is needed
  command -v docker-compose >/dev/null 2>&1 && return
  docker compose version >/dev/null 2>&1 && return
  apt_install docker-compose
}

ensure_redis() {
  if "$PY" -m memstrata.ops.preflight redis "$REDIS_URL" 2>/dev/null; then
    log "Redis answers at $REDIS_URL"; return
  fi
  local host port
  read -r host port < <("$PY" -m memstrata.ops.preflight hostport "$REDIS_URL")
  if port_open "$host" "$port"; then
    "$PY" -m memstrata.ops.preflight redis "$REDIS_URL" || true
    die "something listens on $host:$port but does not answer as Redis at $REDIS_URL"
  fi
  is_local "$host" || die "Redis at $REDIS_URL does not answer (not a local address: not starting one)"
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  # the package may have started its own service on the default port
  if "$PY" -m memstrata.ops.preflight redis "$REDIS_URL" 2>/dev/null; then return; fi
  mkdir -p "$ROOT/var/redis" "$ROOT/var/log"
  local maxmemory="${MEMSTRATA_REDIS_MAXMEMORY:-1gb}"
  log "starting redis-server on $host:$port (ops/redis.conf: AOF on, maxmemory $maxmemory, noeviction; data in var/redis)"
  redis-server "$ROOT/ops/redis.conf" --daemonize yes --bind "$host" --port "$port" \
    --dir "$ROOT/var/redis" --save "" --maxmemory "$maxmemory" \
    --logfile "$ROOT/var/log/redis-$port.log" --pidfile "$ROOT/var/redis/redis-$port.pid"
  wait_until 15 "$PY" -m memstrata.ops.preflight redis "$REDIS_URL" \
    || die "redis-server did not come up; see var/log/redis-$port.log"
  log "Redis answers at $REDIS_URL"
}

_pg_trust_local() {  # let this machine connect over TCP without a password (dev cluster)
  local conf="/etc/postgresql/$1/$2/pg_hba.conf"
  grep -q "memstrata-dev" "$conf" 2>/dev/null && return
  log "allowing password-less TCP connections from this machine in $conf"
  as_root sed -i "1i # memstrata-dev: trust TCP from this machine (ops/setup_env.sh)\n\
host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust" "$conf"
}

_pg_start_local() {
  local port="$1" ver cluster name
  ver="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -1)"
  [ -n "$ver" ] || die "no PostgreSQL server binaries in /usr/lib/postgresql"
  cluster="$(pg_lsclusters -h 2>/dev/null | awk -v p="$port" '$3 == p { print $1, $2; exit }')"
  if [ -z "$cluster" ]; then
    name=main
    if pg_lsclusters -h 2>/dev/null | awk '{ print $1 "/" $2 }' | grep -qx "$ver/main"; then
      name=memstrata
    fi
    # pg_createcluster runs initdb as the postgres user (initdb refuses root)
    log "creating PostgreSQL $ver cluster '$name' on port $port"
    as_root pg_createcluster "$ver" "$name" --port "$port" >&2
    cluster="$ver $name"
  fi
  read -r ver name <<<"$cluster"
  _pg_trust_local "$ver" "$name"
  log "starting PostgreSQL cluster $ver/$name (pg_ctlcluster, as its owner postgres)"
  if pg_lsclusters -h | awk -v v="$ver" -v n="$name" '$1 == v && $2 == n' | grep -q online; then
    as_root pg_ctlcluster "$ver" "$name" reload >&2
  else
    as_root pg_ctlcluster "$ver" "$name" start >&2
  fi
}

ensure_postgres() {  # ensure_postgres [extra database...]
  if ! "$PY" -m memstrata.ops.preflight postgres "$PG_URL" 2>/dev/null; then
    local host port
    read -r host port < <("$PY" -m memstrata.ops.preflight hostport "$PG_URL")
    is_local "$host" || die "PostgreSQL at $host:$port does not answer (not local: not starting one)"
    if port_open "$host" "$port"; then
      "$PY" -m memstrata.ops.preflight postgres "$PG_URL" || true
      die "PostgreSQL on $host:$port refuses the connection of MEMSTRATA_POSTGRES_URL (see above)"
    fi
    command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
    if ! "$PY" -m memstrata.ops.preflight postgres "$PG_URL" 2>/dev/null; then
      _pg_start_local "$port"
      wait_until 30 "$PY" -m memstrata.ops.preflight postgres "$PG_URL" \
        || { "$PY" -m memstrata.ops.preflight postgres "$PG_URL" || true; die "PostgreSQL did not come up"; }
    fi
  fi
  log "PostgreSQL answers at $("$PY" -m memstrata.ops.preflight hostport "$PG_URL" | tr ' ' ':')"
  "$PY" -m memstrata.ops.preflight createdb "$PG_URL" "$@" | sed 's/^/==> /' >&2
}

ensure_flower_password() {  # reuse var/flower-password, or generate it once
  [ -n "${MEMSTRATA_FLOWER_PASSWORD:-}" ] && return
  local file="$ROOT/var/flower-password"
  if [ ! -s "$file" ]; then
    mkdir -p "$ROOT/var"
    (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(18))' > "$file")
    log "generated a Flower password into var/flower-password"
  fi
  MEMSTRATA_FLOWER_PASSWORD="$(cat "$file")"
  export MEMSTRATA_FLOWER_PASSWORD
}
