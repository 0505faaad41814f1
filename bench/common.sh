# Sourced by the bench scripts: weft binary, mpirun's root flag, a scratch folder removed on exit.
WEFT="${WEFT:-build/weft}"
ROOT_FLAG=""
[ "$(id -u)" = "0" ] && ROOT_FLAG="--allow-run-as-root"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
