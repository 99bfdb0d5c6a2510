#!/bin/sh
# The image's entrypoint (platform/Dockerfile). `web`, `worker`, `beat`, `watcher` or `scheduler` runs that process's line of
# platform/Procfile, the same line `make run`'s supervisord starts through this script (platform/supervisord.conf),
# so the image and a local run cannot drift apart.
# Anything else runs as given, e.g. `python manage.py migrate --noinput`.
set -eu
cd "$(dirname "$0")/.."

name=${1:-web}
case "$name" in
  web|worker|beat|watcher|scheduler)
    if [ "$#" -gt 1 ]; then
      echo "docker-entrypoint: '$name' takes no arguments; change platform/Procfile or run a full command" >&2
      exit 64
    fi
    line=$(sed -n "s/^$name:[[:space:]]*//p" platform/Procfile)
    if [ -z "$line" ]; then
      echo "docker-entrypoint: platform/Procfile has no '$name' process" >&2
      exit 64
    fi
    # The line is the image's own Procfile, never user input; `exec` keeps the process as PID 1.
    exec sh -c "exec $line"
    ;;
  *)
    exec "$@"
    ;;
esac
