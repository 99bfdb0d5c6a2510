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
# The scheduler service runs every scheduling cycle; requests only record what changed (jobs/scheduler_service.py).
export PORTAL_SCHEDULER="${PORTAL_SCHEDULER:-service}"
export PORTAL_SUPERVISOR_DIR="$root/supervisor" PORTAL_LOG_DIR="$root/logs"
mkdir -p "$PORTAL_SUPERVISOR_DIR" "$PORTAL_LOG_DIR"
if [ "${1:-}" = ctl ]; then
  shift
  exec .venv/bin/supervisorctl --configuration platform/supervisord.conf "$@"
fi
# supervisord in the foreground, then the TensorBoards and model servers it leaves (platform/supervise_run.py:
# Python, because a shell started with SIGINT ignored cannot trap it).
exec .venv/bin/python platform/supervise_run.py
