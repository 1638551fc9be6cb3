#!/bin/sh
# Start `halluscope serve` on all interfaces with the bearer token from HALLUSCOPE_SERVER_TOKEN (a Kubernetes
# secretKeyRef) or, when that is unset, from the file HALLUSCOPE_SERVER_TOKEN_FILE (default: the compose
# secret /run/secrets/halluscope_token). Without a token the server refuses to listen beyond loopback.
set -eu
if [ -z "${HALLUSCOPE_SERVER_TOKEN:-}" ]; then
  token_file="${HALLUSCOPE_SERVER_TOKEN_FILE:-/run/secrets/halluscope_token}"
  if [ -r "$token_file" ]; then
    HALLUSCOPE_SERVER_TOKEN="$(cat "$token_file")"
    export HALLUSCOPE_SERVER_TOKEN
  fi
fi
exec halluscope serve --host 0.0.0.0 --port "${HALLUSCOPE_SERVER_PORT:-8080}" "$@"
