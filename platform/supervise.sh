#!/bin/sh
# `make run`'s process supervisor: web, worker, beat and watcher under supervisord (platform/supervisord.conf),
# in the foreground. A program that dies is restarted and the others keep running; Ctrl-C stops them all, and
# then the TensorBoards and model servers they started (job supervisors keep running, see below).
# Each program's output reaches this terminal with its name in front, and its own log file.
# supervisord's socket, pid file and log go under $PORTAL_DATA_ROOT/supervisor, the programs' logs under
# $PORTAL_DATA_ROOT/logs (PORTAL_DATA_ROOT defaults to var/, relative paths from the project folder).
#   sh platform/supervise.sh            start everything
#   sh platform/supervise.sh ctl ARGS   supervisorctl on the running one, e.g. `ctl status`, `ctl restart worker`
set -eu
cd "$(dirname "$0")/.."
root=${PORTAL_DATA_ROOT:-var}
case "$root" in
  /*) ;;
  *) root="$PWD/$root" ;;
esac
export PORTAL_DATA_ROOT="$root"
export PORTAL_SUPERVISOR_DIR="$root/supervisor" PORTAL_LOG_DIR="$root/logs"
mkdir -p "$PORTAL_SUPERVISOR_DIR" "$PORTAL_LOG_DIR"
if [ "${1:-}" = ctl ]; then
  shift
  exec .venv/bin/supervisorctl --configuration platform/supervisord.conf "$@"
fi
# supervisord runs in the background of this shell so that the shell is still here when it exits: Ctrl-C
# (SIGINT to the terminal's whole process group) reaches both, SIGINT or SIGTERM to this shell alone is passed
# on. Once every program has stopped, the TensorBoards and model servers they started on this host, which run
# detached in their own sessions, are stopped too (manage.py stop_servers; a model server starts again with
# the next run, a TensorBoard when it is next opened). Job supervisors are left running on purpose: a job
# keeps running across a restart and the next run's worker adopts it again.
.venv/bin/supervisord --configuration platform/supervisord.conf --nodaemon &
supervisord=$!
trap 'kill -TERM "$supervisord" 2>/dev/null || :' INT TERM HUP
status=0
wait "$supervisord" || status=$?
while kill -0 "$supervisord" 2>/dev/null; do # wait returns early when a trapped signal arrives
  status=0
  wait "$supervisord" || status=$?
done
trap - INT TERM HUP
echo "supervise: every program stopped; stopping the TensorBoards and model servers they started on this host"
.venv/bin/python manage.py stop_servers || status=$?
exit "$status"
