#!/bin/sh
# Runs a command against a private redis-server: started on a free loopback
# port without persistence (pidfile and log under $REDIS_RUN_DIR), named in
# LLMGOV_REDIS_URL, and stopped when the command ends, pass or fail.
# LLMGOV_REDIS_SERVER names another server binary (a valkey-server): it is
# exported, so tests that start servers of their own start the same one.
# Usage: with-redis.sh RUN_DIR COMMAND [ARGS...]
set -eu
run_dir=$1
shift
mkdir -p "$run_dir"
# Set but empty is an error (a lookup that failed), not a quiet redis-server.
server=${LLMGOV_REDIS_SERVER-redis-server}
[ -n "$server" ] || { echo "LLMGOV_REDIS_SERVER is set but empty" >&2; exit 1; }
export LLMGOV_REDIS_SERVER="$server"
log="$run_dir/redis.log"
port=
stop() {
  [ -n "$port" ] || return 0
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$(cat "$run_dir/redis.pid")" 2>/dev/null || true
}
trap stop EXIT
# Starts the server on a free port. Ready only once its own log says so: a
# ping could be answered by another process that took the port meanwhile,
# and then this one fails to bind and the start is tried on a new port.
start() {
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  : >"$log"
  "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$run_dir" --pidfile "$run_dir/redis.pid" --logfile "$log"
  i=0
  until grep -q "Ready to accept connections" "$log"; do
    if grep -q "Address already in use" "$log"; then port=; return 1; fi
    i=$((i + 1))
    [ "$i" -lt 100 ] || { echo "$server did not start; see $log" >&2; exit 1; }
    sleep 0.1
  done
}
start || start || start || { echo "$server found no free port in 3 tries; see $log" >&2; exit 1; }
echo "$("$server" --version | sed 's/^\([A-Za-z]*\) server v=\([^ ]*\).*/\1 \2/') on 127.0.0.1:$port"
export LLMGOV_REDIS_URL="redis://127.0.0.1:$port"
"$@"
