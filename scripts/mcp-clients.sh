#!/usr/bin/env bash
# Real MCP clients against `agent-hub mcp` (issue 12, "Typed MCP tools"; docs/mcp.md):
# the MCP Inspector's CLI (npm @modelcontextprotocol/inspector, pinned) and the official Python
# SDK (PyPI mcp, pinned), both driving a fresh demo hub on an ephemeral port.
#
#   scripts/mcp-clients.sh [--no-build] [--keep]
#
# 1. builds target/release/{agent-hub,agent-hub-server} (--no-build uses what is there);
# 2. installs, once, into $E2E_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/agent-hub-e2e, outside
#    the repository): the Inspector into inspector@$INSPECTOR_VERSION, and a Python venv with
#    mcp==$MCP_PY_VERSION into mcp-py@$MCP_PY_VERSION (falls back to a python3 that already
#    imports mcp and jsonschema). Later runs reuse them and take seconds;
# 3. starts `agent-hub-server demo DIR --port 0` (identities worker and orchestrator);
# 4. Inspector CLI, as worker: tools/list (every argument of every tool has a JSON-schema
#    type, send's body "object"; the Inspector's own schema check reports no error), send with
#    `--tool-arg body={...}` (the orchestrator's `agent-hub await` gets the body as a JSON
#    object, not a string), send with a plain-text body (arrives as a string), status with
#    waitFor=acked (acked, reader cli-await: the orchestrator's await acked it);
# 5. scripts/mcp-clients-sdk.py with the Python SDK: schemas valid JSON Schema and typed, a
#    structured body through send and the MCP await arrives as an object, status waitFor=acked
#    says reader mcp-await.
#
# One PASS/FAIL line per check. Exit 0 all passed, 1 a check failed, 77 skipped (no node/npm or
# python3, or a package could not be installed: the network is not the code's fault).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
INSPECTOR_VERSION=2.12.0
MCP_PY_VERSION=2.3.0
CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-hub-e2e}
build=1 keep=0
for a in "$@"; do
    case $a in
        --no-build) build=0 ;;
        --keep) keep=1 ;;
        *) echo "usage: scripts/mcp-clients.sh [--no-build] [--keep]" >&2; exit 2 ;;
    esac
done
skip() { echo "SKIP mcp-clients: $*"; exit 77; }
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
step() { echo "== $*"; }

command -v node >/dev/null && command -v npm >/dev/null || skip "node and npm are needed for the Inspector"
command -v python3 >/dev/null || skip "python3 is needed for the SDK client"
mkdir -p "$CACHE"

if ((build)); then
    step "building target/release (cargo build --release --bins)"
    cargo build --release --bins --quiet || { echo "FAIL build"; exit 1; }
fi
AH=$ROOT/target/release/agent-hub
SERVER=$ROOT/target/release/agent-hub-server
[[ -x $AH && -x $SERVER ]] || { echo "FAIL build: no release binaries"; exit 1; }

# ---- the Inspector (npm), cached --------------------------------------------------------
INSP_DIR=$CACHE/inspector@$INSPECTOR_VERSION
INSPECTOR=$INSP_DIR/node_modules/.bin/mcp-inspector
if [[ ! -x $INSPECTOR ]]; then
    step "installing @modelcontextprotocol/inspector@$INSPECTOR_VERSION into $INSP_DIR (once)"
    mkdir -p "$INSP_DIR"
    timeout 600 npm install --no-audit --no-fund --prefix "$INSP_DIR" \
        "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >"$INSP_DIR.npm.log" 2>&1 \
        || skip "npm could not install the Inspector (see $INSP_DIR.npm.log)"
fi

# ---- the Python SDK (PyPI), cached ------------------------------------------------------
PY_DIR=$CACHE/mcp-py@$MCP_PY_VERSION
PY=$PY_DIR/bin/python3
if [[ ! -x $PY ]] || ! "$PY" -c "import mcp, jsonschema" >/dev/null 2>&1; then
    step "installing mcp==$MCP_PY_VERSION into $PY_DIR (once)"
    if ! { python3 -m venv "$PY_DIR" >"$PY_DIR.pip.log" 2>&1 &&
        timeout 600 "$PY" -m pip install --quiet --disable-pip-version-check \
            "mcp==$MCP_PY_VERSION" jsonschema >>"$PY_DIR.pip.log" 2>&1; }; then
        if python3 -c "import mcp, jsonschema" >/dev/null 2>&1; then
            echo "note: venv install failed (see $PY_DIR.pip.log); using $(command -v python3), which has mcp"
            PY=python3
        else
            skip "pip could not install mcp==$MCP_PY_VERSION (see $PY_DIR.pip.log)"
        fi
    fi
fi

# ---- a demo hub on an ephemeral port ----------------------------------------------------
d=$(mktemp -d "${TMPDIR:-/tmp}/agent-hub-mcp-clients.XXXXXX")
hub_pid=
cleanup() {
    [[ -n $hub_pid ]] && kill "$hub_pid" 2>/dev/null && wait "$hub_pid" 2>/dev/null
    if ((keep)); then echo "kept $d"; else rm -rf "$d"; fi
}
trap cleanup EXIT
step "starting agent-hub-server demo on port 0"
"$SERVER" demo "$d/hub" --port 0 >"$d/hub.out" 2>"$d/hub.err" &
hub_pid=$!
port=
for ((i = 0; i < 150; i++)); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' "$d/hub.out" 2>/dev/null | head -n1)
    [[ -n $port ]] && break
    kill -0 "$hub_pid" 2>/dev/null || break
    sleep 0.1
done
[[ -n $port ]] || { echo "FAIL hub: the demo did not start: $(cat "$d/hub.err")"; exit 1; }
tok_w=$d/hub/tokens/worker.token
tok_o=$d/hub/tokens/orchestrator.token
as_worker=(mcp --as worker --token-file "$tok_w" --port "$port")
as_orch=(--as orchestrator --token-file "$tok_o" --port "$port")

# A JSON check on a file: `jcheck FILE PYTHON-EXPRESSION-ON-v` prints the expression's value
# (or an error) and succeeds when it is truthy.
jcheck() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    r = eval(sys.argv[2], {"v": v})
except Exception as e:
    print(f"error: {e}")
    sys.exit(1)
print(r)
sys.exit(0 if r is True else 1)
EOF
}

inspector() { timeout 60 "$INSPECTOR" --cli "$AH" "${as_worker[@]}" "$@"; }

# ---- the Inspector CLI ------------------------------------------------------------------
step "Inspector $INSPECTOR_VERSION: tools/list"
if inspector --method tools/list >"$d/tools.json" 2>"$d/tools.err"; then
    why=$(jcheck "$d/tools.json" '[t["name"] + "." + a for t in v["tools"] for a, s in t["inputSchema"].get("properties", {}).items() if not isinstance(s.get("type"), str)] or True') \
        && pass inspector-every-argument-typed || fail inspector-every-argument-typed "untyped: $why"
    why=$(jcheck "$d/tools.json" '[t for t in v["tools"] if t["name"] == "send"][0]["inputSchema"]["properties"]["body"]["type"] == "object"') \
        && pass inspector-send-body-object || fail inspector-send-body-object "$why"
    why=$(jcheck "$d/tools.json" '"status" in [t["name"] for t in v["tools"]]') \
        && pass inspector-status-tool || fail inspector-status-tool "$why"
    # The Inspector's own portability report (stderr): "N errors, M warnings".
    if grep -q "Schema portability: 0 errors" "$d/tools.err" || ! grep -q "Schema portability" "$d/tools.err"; then
        pass inspector-schema-portability
    else
        fail inspector-schema-portability "$(grep "Schema portability" "$d/tools.err")"
    fi
else
    fail inspector-tools-list "exit $?: $(head -c 400 "$d/tools.err")"
fi

body='{"task":"review","files":["a.rs","b.rs"],"depth":2}'
step "Inspector: send a structured body, orchestrator awaits it"
if inspector --method tools/call --tool-name send --tool-arg to=orchestrator \
    --tool-arg kind=task --tool-arg "body=$body" >"$d/send.json" 2>"$d/send.err"; then
    id=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("" if r.get("isError") else r["content"][0]["text"])' "$d/send.json" 2>/dev/null)
    if [[ -n $id ]]; then
        pass inspector-send
        if "$AH" await "${as_orch[@]}" --timeout 10 >"$d/env.json" 2>"$d/await.err"; then
            why=$(jcheck "$d/env.json" "v['id'] == '$id' and isinstance(v['body'], dict) and v['body'] == $body") \
                && pass inspector-body-arrives-as-object || fail inspector-body-arrives-as-object "$(cat "$d/env.json")"
        else
            fail inspector-body-arrives-as-object "await failed: $(cat "$d/await.err")"
        fi
        step "Inspector: status waitFor=acked"
        if inspector --method tools/call --tool-name status --tool-arg "id=$id" \
            --tool-arg waitFor=acked --tool-arg timeoutSecs=10 >"$d/status.json" 2>"$d/status.err"; then
            python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); open(sys.argv[2],"w").write(r["content"][0]["text"])' \
                "$d/status.json" "$d/status.txt" 2>/dev/null
            why=$(jcheck "$d/status.txt" '(v["state"], v.get("reader"), v.get("wait")) == ("acked", "cli-await", "reached")') \
                && pass inspector-status-acked-by-cli-await || fail inspector-status-acked-by-cli-await "$(cat "$d/status.txt")"
        else
            fail inspector-status-acked-by-cli-await "exit $?: $(head -c 400 "$d/status.err")"
        fi
    else
        fail inspector-send "$(head -c 400 "$d/send.json")"
    fi
else
    fail inspector-send "exit $?: $(head -c 400 "$d/send.err")"
fi

step "Inspector: send plain text"
if inspector --method tools/call --tool-name send --tool-arg to=orchestrator \
    --tool-arg kind=note --tool-arg "body=just words" >"$d/send2.json" 2>"$d/send2.err" &&
    "$AH" await "${as_orch[@]}" --timeout 10 >"$d/env2.json" 2>"$d/await2.err"; then
    why=$(jcheck "$d/env2.json" 'v["body"] == "just words"') \
        && pass inspector-text-body-arrives-as-string || fail inspector-text-body-arrives-as-string "$(cat "$d/env2.json")"
else
    fail inspector-text-body-arrives-as-string "$(head -c 400 "$d/send2.err" "$d/await2.err")"
fi

# ---- the Python SDK ---------------------------------------------------------------------
step "Python SDK mcp==$MCP_PY_VERSION"
timeout 120 "$PY" scripts/mcp-clients-sdk.py "$AH" "$port" "$tok_w" "$tok_o" >"$d/sdk.out" 2>"$d/sdk.err"
rc=$?
cat "$d/sdk.out"
grep -q '^FAIL' "$d/sdk.out" && fails=$((fails + $(grep -c '^FAIL' "$d/sdk.out")))
if ((rc != 0)) && ! grep -q '^FAIL' "$d/sdk.out"; then
    fail sdk "exit $rc: $(tail -n 5 "$d/sdk.err")"
fi

if ((fails)); then
    echo "mcp-clients: $fails check(s) failed"
    exit 1
fi
echo "mcp-clients: all checks passed"
