#!/usr/bin/env bash
# Interop of agent-hub's relay with the REAL claudectl 0.64 (docs/relay-protocol.md "Interop
# with claudectl", docs/delegation.md "Across hubs"), on loopback only.
#
#   scripts/claudectl-interop.sh [--no-build] [--keep]
#
# 1. Installs claudectl 0.64.x from crates.io (`cargo install --locked`) into a cache outside
#    the repository ($E2E_CACHE/claudectl, default ~/.cache/agent-hub-e2e; reused when its
#    version is right), unless $CLAUDECTL_BIN names one. No cargo, no registry or a failed
#    build: every check is SKIPped and the exit status is 77.
# 2. Builds target/release/{agent-hub,agent-hub-server,fake-acp-agent} (--no-build: uses them).
# 3. Gives claudectl its own HOME: identity `ctl`, the peer `hub` (key file: the PSK as 64 hex
#    chars, mode 600, and its address in peers/hub.meta, the layout `relay accept` and
#    `relay connect` write), relay config listen_addr 127.0.0.3 and a 2 s heartbeat, and a
#    fake `claude` first on its PATH: claudectl's worker runs `claude --print PROMPT` in the
#    task's cwd and judges the task by its exit code only; the fake records argv and cwd and
#    exits 0 (or sleeps, as itself, when the prompt says "hang"). Then `claudectl relay serve
#    --port P` on 127.0.0.3.
# 4. Starts agent-hub-server (config.example.toml on port 0, one identity `orchestrator`) with
#    [relay] peer_id `hub` on 127.0.0.2, one peer `ctl` (allow_v0, delegate = true) dialled at
#    a line-recording tap (scripts/claudectl-tap.py, 127.0.0.4) in front of claudectl's serve,
#    and [tasks] whose manifests_dir holds a `claude` manifest (claudectl's delegate_task names
#    no agent, so our hub runs its default, claude) whose run.acp is a two-line switch running
#    target/release/fake-acp-agent with the scenario in a file: `end_turn 2` or `hang`.
#
# Checks, one PASS/FAIL line each:
#   link-up           our hub's status file shows peer ctl up over v0 (we dialled its serve)
#   ctl-delegate      `claudectl relay delegate hub PROMPT --cwd DIR` exits 0 (a one-shot)
#   ctl-status        claudectl's lasting link got task_status `running` for that task (tap),
#                     and claudectl's serve logged TaskStatus from hub
#   ctl-handoff       ... and a task_handoff `completed` whose summary is the fake agent's text,
#                     and claudectl's serve logged TaskHandoff from hub
#   ctl-periodic      a hanging task (fake-acp-agent hang) reports task_status `running` again
#                     while it runs (tasks.peer_status_secs = 2), elapsed_secs grown
#   ctl-interrupt     that task, once running: `claudectl relay
#                     interrupt --peer hub TASK stop` exits 0 and the lasting link gets a
#                     `failed` handoff "Stopped by controller"
#   hub-delegate      `agent-hub delegate --peer ctl --agent claude` reached claudectl's serve
#                     (it logged DelegateTask) and its fake claude ran with --print PROMPT in
#                     the task's cwd
#   hub-outcome       `agent-hub await --reply-to TASK --kind task_outcome`: completed, peer
#                     ctl, text claudectl's "Task completed successfully"
#   hub-cancel        `agent-hub task cancel` of a task hanging on claudectl (its fake claude
#                     sleeps): claudectl logs TaskInterrupt stop, answers a failed handoff
#                     "Stopped by controller", and the outcome is `cancelled`
#   hub-silent        a delegate_task whose cwd claudectl cannot enter: claudectl only prints
#                     "Failed to accept task" and sends nothing; our --timeout 3 ends the task
#                     `timed_out` (that silence is claudectl 0.64's behaviour)
#   link-kept         after all the one-shots the tap saw exactly one connection, our status
#                     file says ctl up with reconnects 0, and claudectl's serve logged no
#                     disconnect
#
# Exit status: 0 all passed, 1 a check failed (or usage), 77 claudectl could not be installed
# or a prerequisite (python3, cargo) is missing. Nothing fails for lack of network: that is a
# SKIP. Work files are under a mktemp dir, removed on success, kept (path printed) on failure
# or with --keep. Every process started here is stopped by its PID on exit.
#
# Environment: E2E_CACHE, CLAUDECTL_VERSION (default ~0.64: the newest 0.64.x),
# CLAUDECTL_BIN (use this binary instead), CLAUDECTL_TIMEOUT (per wait, default 60 s).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-hub-e2e}
CTL_VERSION=${CLAUDECTL_VERSION:-~0.64}
WAIT=${CLAUDECTL_TIMEOUT:-60}
BUILD=1
KEEP=0
while (($#)); do
    case $1 in
        --no-build) BUILD=0; shift ;;
        --keep) KEEP=1; shift ;;
        -h | --help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "interop: unknown argument '$1'" >&2; exit 1 ;;
    esac
done

NPASS=0 NFAIL=0 NSKIP=0
CHECKS=(link-up ctl-delegate ctl-status ctl-handoff ctl-periodic ctl-interrupt hub-delegate hub-outcome
    hub-cancel hub-silent link-kept)
pass() { NPASS=$((NPASS + 1)); echo "PASS [$1] $2"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL [$1] $2"; }
note() { echo "     $1"; }
# Setup failed before the checks could run: the rest are not run (counted as failed).
abort() {
    NFAIL=$((NFAIL + ${#CHECKS[@]} - NPASS - NFAIL))
    echo "interop: $NPASS passed, $NFAIL failed, $NSKIP skipped (setup failed)"
    exit 1
}

PIDS=()
WORK=""
reap() {
    local p=$1 i
    kill -TERM "$p" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in ${PIDS[@]+"${PIDS[@]}"}; do reap "$p"; done
    if [[ -n $WORK && -d $WORK ]]; then
        if ((KEEP || NFAIL || rc != 0 && rc != 77)); then
            echo "interop: work files kept in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

all_skipped() {
    echo "SKIP: $1"
    echo "interop: 0 passed, 0 failed, ${#CHECKS[@]} skipped"
    exit 77
}

# Polls `cmd...` every 0.2 s for up to WAIT seconds; never asserts a speed.
wait_until() {
    local i
    for ((i = 0; i < WAIT * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}
wait_for_line() {
    local file=$1 expr=$2 out i
    for ((i = 0; i < WAIT * 5; i++)); do
        out=$(sed -n "$expr" "$file" 2>/dev/null | head -n1)
        [[ -n $out ]] && { echo "$out"; return 0; }
        sleep 0.2
    done
    return 1
}

command -v python3 >/dev/null || all_skipped "python3 not found (the tap and the checks need it)"

# ---- claudectl 0.64.x, cached -----------------------------------------------------------
CTL_ROOT=$E2E_CACHE/claudectl
# Progress: the three long steps, numbered, each with its time.
T_START=$SECONDS
STEP_T0=$SECONDS
step() { STEP_T0=$SECONDS; echo "interop: [$1/3] $2 (at $((SECONDS - T_START))s)"; }
step_done() { echo "interop: [$1/3] done in $((SECONDS - STEP_T0))s"; }
step 1 "claudectl $CTL_VERSION (installed once into the cache, then reused)"
ctl_ok() { "$1" --version 2>/dev/null | grep -q '^claudectl 0\.64\.'; }
if [[ -n ${CLAUDECTL_BIN:-} ]]; then
    CTL=$CLAUDECTL_BIN
    ctl_ok "$CTL" || all_skipped "CLAUDECTL_BIN=$CTL is not claudectl 0.64.x"
else
    CTL=$CTL_ROOT/bin/claudectl
    if ! ctl_ok "$CTL"; then
        command -v cargo >/dev/null || all_skipped "cargo not found (claudectl installs from crates.io)"
        mkdir -p "$CTL_ROOT"
        echo "interop: [1/3] installing claudectl $CTL_VERSION from crates.io into $CTL_ROOT (a release build: about 15 min on 2 cores, once)"
        timeout 1500 cargo install claudectl --version "$CTL_VERSION" --locked --force \
            --root "$CTL_ROOT" >"$CTL_ROOT/install.log" 2>&1 &
        ctl_pid=$!
        PIDS+=("$ctl_pid")
        # A line a minute while it builds: how long so far and how many crates are compiled.
        while kill -0 "$ctl_pid" 2>/dev/null; do
            for _ in $(seq 60); do kill -0 "$ctl_pid" 2>/dev/null || break; sleep 1; done
            kill -0 "$ctl_pid" 2>/dev/null || break
            echo "interop: [1/3] still building claudectl: $(((SECONDS - STEP_T0) / 60)) min, $(grep -c '^ *Compiling' "$CTL_ROOT/install.log" 2>/dev/null || true) crates compiled"
        done
        if ! wait "$ctl_pid"; then
            all_skipped "cargo install claudectl $CTL_VERSION failed: $(grep -m1 -E '^error' "$CTL_ROOT/install.log" || tail -n1 "$CTL_ROOT/install.log")"
        fi
        ctl_ok "$CTL" || all_skipped "the installed claudectl is not 0.64.x: $("$CTL" --version 2>&1 | head -n1)"
    fi
fi
CTL_V=$("$CTL" --version | head -n1)
step_done 1

if ((BUILD)); then
    step 2 "building agent-hub's binaries (cargo build --release; many minutes from clean, seconds after)"
    (cd "$ROOT" && cargo build --release --bins >/dev/null 2>&1) \
        || { echo "interop: cargo build --release failed" >&2; exit 1; }
    step_done 2
fi
AH=$ROOT/target/release/agent-hub
SERVER=$ROOT/target/release/agent-hub-server
FAKE=$ROOT/target/release/fake-acp-agent
for b in "$AH" "$SERVER" "$FAKE"; do
    [[ -x $b ]] || { echo "interop: $b is missing (build it or drop --no-build)" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agent-hub-ctl-interop.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
echo "interop: $CTL_V ($CTL), work in $WORK"
step 3 "the interop checks (about a minute)"
T0=$SECONDS

free_port() {
    python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$1"
}
KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')

# ---- claudectl's side -------------------------------------------------------------------
CH=$WORK/ctl-home
mkdir -p "$CH/.claudectl/relay/peers" "$CH/.config/claudectl" "$CH/bin" "$WORK/ctl-task"
printf 'ctl' >"$CH/.claudectl/relay/identity"
printf '%s' "$KEY" >"$CH/.claudectl/relay/peers/hub.key"
chmod 600 "$CH/.claudectl/relay/peers/hub.key"
cat >"$CH/.config/claudectl/config.toml" <<'EOF'
[relay]
listen_addr = "127.0.0.3"
heartbeat_interval_secs = 2
EOF
cat >"$CH/bin/claude" <<EOF
#!/bin/sh
# The fake claude claudectl's worker spawns: records how it was run, exits 0.
{ printf 'cwd=%s\n' "\$(pwd -P)"; for a in "\$@"; do printf 'arg=%s\n' "\$a"; done; } >>"$WORK/claude-calls.log"
# A prompt asking to hang sleeps (as this process, so claudectl's kill ends it).
case "\$2" in *hang*) exec sleep 600 ;; esac
exit 0
EOF
chmod 755 "$CH/bin/claude"
CTL_PORT=$(free_port 127.0.0.3)
ctl_env=(env -i HOME="$CH" PATH="$CH/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb)
(cd "$WORK/ctl-task" && exec "${ctl_env[@]}" "$CTL" relay serve --port "$CTL_PORT" \
    >"$WORK/ctl-serve.out" 2>"$WORK/ctl-serve.err") &
PIDS+=("$!")
wait_for_line "$WORK/ctl-serve.out" '/Relay listening on/p' >/dev/null \
    || { fail link-up "claudectl relay serve did not start: $(tail -n3 "$WORK/ctl-serve.err")"; abort; }

# ---- the tap between our hub and claudectl's serve --------------------------------------
python3 "$ROOT/scripts/claudectl-tap.py" 127.0.0.4 127.0.0.3 "$CTL_PORT" "$WORK/tap.jsonl" \
    >"$WORK/tap.out" 2>"$WORK/tap.err" &
PIDS+=("$!")
TAP=$(wait_for_line "$WORK/tap.out" 's/^tap on \(.*\)$/\1/p') \
    || { fail link-up "the tap did not start: $(cat "$WORK/tap.err")"; abort; }

# ---- our hub ----------------------------------------------------------------------------
HD=$WORK/hub
mkdir -p "$HD/tokens" "$HD/keys" "$HD/manifests" "$WORK/hub-task"
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
printf '[agents]\norchestrator = "%s"\n' "$TOKEN" >"$HD/roster.toml"
printf '%s\n' "$TOKEN" >"$HD/tokens/orchestrator.token"
printf '%s\n' "$KEY" >"$HD/keys/ctl.key"
chmod 600 "$HD/roster.toml" "$HD/tokens/orchestrator.token" "$HD/keys/ctl.key"
echo "end_turn 2" >"$WORK/scenario"
cat >"$WORK/fake-claude-acp" <<EOF
#!/bin/sh
# run.acp of the test's claude manifest: the fake ACP agent in the scenario the script sets.
exec "$FAKE" \$(cat "$WORK/scenario")
EOF
chmod 755 "$WORK/fake-claude-acp"
cat >"$HD/manifests/claude.toml" <<EOF
name = "claude"
display = "Fake ACP agent standing in for Claude Code (claudectl interop)"
binaries = ["fake-acp-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = ["$WORK/fake-claude-acp"]
headless = []
outcome = "exit-code"

[deliver]
mode = "pull"

[install]
mcp_config = ""
hook = "none"
skills_dir = ""
EOF
{
    sed 's/^port = 46110$/port = 0/' "$ROOT/config.example.toml"
    cat <<EOF

[relay]
peer_id = "hub"
listen = "127.0.0.2:0"
heartbeat_interval_ms = 2000
handshake_timeout_ms = 10000
reconnect_backoff_ms = [500, 1000]
features = ["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta", "agents"]
status_path = "relay-status.json"

[[relay.peers]]
id = "ctl"
address = "$TAP"
key_file = "keys/ctl.key"
allow_v0 = true
delegate = true

[tasks]
cwd_roots = ["$WORK/hub-task", "$WORK/ctl-task"]
manifests_dir = "$HD/manifests"
timeout_secs = 120
peer_status_secs = 2
EOF
} >"$HD/config.toml"
chmod 600 "$HD/config.toml"
(cd "$HD" && exec env -i HOME="$HD" PATH="$(dirname "$FAKE"):/usr/local/bin:/usr/bin:/bin" \
    LANG=C.UTF-8 "$SERVER" --config "$HD/config.toml" >"$WORK/hub.out" 2>"$WORK/hub.err") &
PIDS+=("$!")
HUB_PORT=$(wait_for_line "$WORK/hub.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p') \
    || { fail link-up "agent-hub-server did not start: $(tail -n3 "$WORK/hub.err" "$HD/service.log" 2>/dev/null)"; abort; }
RELAY=$(wait_for_line "$HD/service.log" 's/.*relay started as .*listening on \(127\.0\.0\.2:[0-9]*\).*/\1/p') \
    || { fail link-up "no relay start line in $HD/service.log"; abort; }
printf '{"addr":"%s","last_seen":0}' "$RELAY" >"$CH/.claudectl/relay/peers/hub.meta"
note "hub: client 127.0.0.1:$HUB_PORT, relay $RELAY; claudectl serve 127.0.0.3:$CTL_PORT behind tap $TAP"
ORCH=(--as orchestrator --token-file "$HD/tokens/orchestrator.token" --port "$HUB_PORT")

# The status file's row for ctl, as JSON (empty when absent).
ctl_row() {
    python3 - "$HD/relay-status.json" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
rows = s.get("peers", [])
rows = rows.values() if isinstance(rows, dict) else rows
for r in rows:
    if r.get("id", r.get("peer_id")) == "ctl":
        print(json.dumps(r)); sys.exit(0)
sys.exit(1)
PY
}
ctl_up() { ctl_row | grep -q '"state": "up"'; }

if wait_until ctl_up; then
    pass link-up "peer ctl up: $(ctl_row)"
else
    fail link-up "peer ctl never up: $(ctl_row || echo 'no row')"
fi

# Messages the tap saw on the lasting link toward claudectl, as "msg_type task_id state|summary".
# tap_has TYPE TASK WANT: a TYPE message for TASK whose payload's state (or summary) is WANT,
# toward claudectl (TAP_DIR=to_hub: from it).
tap_has() {
    python3 - "$WORK/tap.jsonl" "$@" "${TAP_DIR:-to_ctl}" <<'PY'
import json, sys
path, want_type, task, want, direction = sys.argv[1:6]
for rec in map(json.loads, open(path)):
    if rec["dir"] != direction:
        continue
    try:
        m = json.loads(rec["line"])
    except ValueError:
        continue
    p = m.get("payload", {})
    if m.get("msg_type") == want_type and p.get("task_id") == task and want in (p.get("state"), p.get("summary")):
        print(json.dumps(m)); sys.exit(0)
sys.exit(1)
PY
}
tap_msg() {
    python3 - "$WORK/tap.jsonl" "$1" "$2" <<'PY'
import json, sys
path, want_type, task = sys.argv[1:4]
for rec in map(json.loads, open(path)):
    try:
        m = json.loads(rec["line"]) if rec["dir"] == "to_ctl" else {}
    except ValueError:
        continue
    if m.get("msg_type") == want_type and m.get("payload", {}).get("task_id") == task:
        print(json.dumps(m["payload"])); sys.exit(0)
sys.exit(1)
PY
}
serve_logged() { grep -q "$1" "$WORK/ctl-serve.out"; }
# status_count TASK N: at least N task_status running for TASK on the lasting link, the later
# ones with a larger elapsed_secs; prints their elapsed_secs.
status_count() {
    python3 - "$WORK/tap.jsonl" "$1" "$2" <<'PY'
import json, sys
path, task, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
el = []
for rec in map(json.loads, open(path)):
    try:
        m = json.loads(rec["line"]) if rec["dir"] == "to_ctl" else {}
    except ValueError:
        continue
    p = m.get("payload", {})
    if m.get("msg_type") == "task_status" and p.get("task_id") == task and p.get("state") == "running":
        el.append(p.get("stats", {}).get("elapsed_secs"))
print("elapsed_secs %s" % el)
sys.exit(0 if len(el) >= n and el[-1] is not None and el[0] is not None and el[-1] > el[0] else 1)
PY
}

# ---- (a) claudectl delegates to our hub -------------------------------------------------
ctl_delegate() {
    (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" relay delegate hub "$1" --cwd "$WORK/hub-task") \
        >"$WORK/$2.out" 2>"$WORK/$2.err"
}
TASK_A=""
if ctl_delegate "interop task A: say done" delegate-a; then
    TASK_A=$(sed -n 's/^Task \([^ ]*\) delegated to peer hub$/\1/p' "$WORK/delegate-a.out")
fi
if [[ -n $TASK_A ]]; then
    pass ctl-delegate "claudectl relay delegate sent $TASK_A to hub (a one-shot connection)"
    if wait_until tap_has task_status "$TASK_A" running && wait_until serve_logged "TaskStatus from hub"; then
        pass ctl-status "task_status running reached claudectl's lasting link: $(tap_msg task_status "$TASK_A")"
    else
        fail ctl-status "no task_status running for $TASK_A on the lasting link"
    fi
    if wait_until tap_has task_handoff "$TASK_A" completed && wait_until serve_logged "TaskHandoff from hub"; then
        pass ctl-handoff "completed handoff reached claudectl: $(tap_msg task_handoff "$TASK_A")"
    else
        fail ctl-handoff "no completed task_handoff for $TASK_A: $(tap_msg task_handoff "$TASK_A" || echo none)"
    fi
else
    fail ctl-delegate "claudectl relay delegate failed: $(cat "$WORK/delegate-a.err" "$WORK/delegate-a.out")"
    fail ctl-status "no task"
    fail ctl-handoff "no task"
fi

# ---- (b) claudectl stops a hanging task -------------------------------------------------
echo "hang" >"$WORK/scenario"
TASK_B=""
if ctl_delegate "interop task B: hang until stopped" delegate-b; then
    TASK_B=$(sed -n 's/^Task \([^ ]*\) delegated to peer hub$/\1/p' "$WORK/delegate-b.out")
fi
if [[ -z $TASK_B ]]; then
    fail ctl-periodic "claudectl relay delegate failed: $(cat "$WORK/delegate-b.err")"
    fail ctl-interrupt "no task"
elif ! wait_until tap_has task_status "$TASK_B" running; then
    fail ctl-periodic "task $TASK_B never reported running"
    fail ctl-interrupt "task $TASK_B never reported running"
else
    # tasks.peer_status_secs = 2: another task_status while it runs, elapsed_secs grown.
    if wait_until status_count "$TASK_B" 2; then
        pass ctl-periodic "the running task reported again: $(status_count "$TASK_B" 2)"
    else
        fail ctl-periodic "no second task_status for $TASK_B: $(status_count "$TASK_B" 2)"
    fi
    if ! (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" relay interrupt --peer hub "$TASK_B" stop interop test) \
        >"$WORK/interrupt.out" 2>"$WORK/interrupt.err"; then
        fail ctl-interrupt "claudectl relay interrupt failed: $(cat "$WORK/interrupt.err")"
    elif wait_until tap_has task_handoff "$TASK_B" "Stopped by controller" \
        && tap_has task_handoff "$TASK_B" failed >/dev/null; then
        pass ctl-interrupt "stop gave a failed handoff: $(tap_msg task_handoff "$TASK_B")"
    else
        fail ctl-interrupt "no failed 'Stopped by controller' handoff for $TASK_B: $(tap_msg task_handoff "$TASK_B" || echo none)"
    fi
fi
echo "end_turn 2" >"$WORK/scenario"

# ---- (c) our hub delegates to claudectl's serve -----------------------------------------
PROMPT_C="interop task C from agent-hub"
TASK_C=""
if "$AH" delegate "${ORCH[@]}" --peer ctl --agent claude --cwd "$WORK/ctl-task" \
    --prompt "$PROMPT_C" --timeout 120 >"$WORK/delegate-c.out" 2>"$WORK/delegate-c.err"; then
    TASK_C=$(head -n1 "$WORK/delegate-c.out")
fi
if [[ -z $TASK_C ]]; then
    fail hub-delegate "agent-hub delegate --peer ctl failed: $(cat "$WORK/delegate-c.err")"
    fail hub-outcome "no task"
else
    "$AH" await "${ORCH[@]}" --reply-to "$TASK_C" --kind task_outcome --timeout "$WAIT" \
        >"$WORK/outcome-c.json" 2>"$WORK/outcome-c.err" || true
    if serve_logged "DelegateTask '.*' from hub" \
        && grep -qx "cwd=$WORK/ctl-task" "$WORK/claude-calls.log" 2>/dev/null \
        && grep -qx -- "arg=--print" "$WORK/claude-calls.log" \
        && grep -qx -- "arg=$PROMPT_C" "$WORK/claude-calls.log"; then
        pass hub-delegate "claudectl's serve ran its claude (--print PROMPT in $WORK/ctl-task) for $TASK_C"
    else
        fail hub-delegate "claudectl did not run the task: $(grep -i delegate "$WORK/ctl-serve.out" | tail -n2; cat "$WORK/claude-calls.log" 2>/dev/null)"
    fi
    verdict=$(TASK=$TASK_C python3 - "$WORK/outcome-c.json" <<'PY'
import json, os, sys
try:
    env = json.loads(open(sys.argv[1]).readline())
except (OSError, ValueError):
    print("FAIL no task_outcome envelope"); sys.exit()
b = env.get("body", {})
ok = (env.get("kind") == "task_outcome" and env.get("correlationId", env.get("correlation_id")) == os.environ["TASK"]
      and b.get("state") == "completed" and b.get("peer") == "ctl" and "Task completed successfully" in json.dumps(b))
print(("PASS " if ok else "FAIL ") + json.dumps(env)[:400])
PY
)
    if [[ $verdict == PASS* ]]; then
        pass hub-outcome "task_outcome for $TASK_C: ${verdict#PASS }"
    else
        fail hub-outcome "${verdict#FAIL }; $(cat "$WORK/outcome-c.err")"
    fi
fi

# ---- (c2) our hub cancels a task running on claudectl -----------------------------------
# `agent-hub task cancel` sends task_interrupt stop on the lasting link; claudectl's worker
# kills its claude and answers a failed handoff "Stopped by controller": outcome cancelled.
TASK_D=""
if "$AH" delegate "${ORCH[@]}" --peer ctl --agent claude --cwd "$WORK/ctl-task" \
    --prompt "interop task D: hang" --timeout 120 >"$WORK/delegate-d.out" 2>"$WORK/delegate-d.err"; then
    TASK_D=$(head -n1 "$WORK/delegate-d.out")
fi
d_running() { "$AH" task status "${ORCH[@]}" --id "$TASK_D" | grep -q '"state":"running"'; }
d_started() { grep -qx -- "arg=interop task D: hang" "$WORK/claude-calls.log"; }
if [[ -z $TASK_D ]]; then
    fail hub-cancel "agent-hub delegate failed: $(cat "$WORK/delegate-d.err")"
elif ! wait_until d_started || ! wait_until d_running; then
    fail hub-cancel "task $TASK_D never ran on claudectl: $("$AH" task status "${ORCH[@]}" --id "$TASK_D" 2>&1)"
else
    "$AH" task cancel "${ORCH[@]}" --id "$TASK_D" >"$WORK/cancel-d.out" 2>&1 || true
    "$AH" await "${ORCH[@]}" --reply-to "$TASK_D" --kind task_outcome --timeout "$WAIT" \
        >"$WORK/outcome-d.json" 2>"$WORK/outcome-d.err" || true
    state=$(python3 -c 'import json,sys; b=json.loads(open(sys.argv[1]).readline())["body"]; print(b.get("state"), "|", b.get("reason", b.get("text")))' "$WORK/outcome-d.json" 2>/dev/null || echo none)
    if [[ $state == cancelled* ]] && serve_logged "TaskInterrupt '$TASK_D' (stop) from hub" \
        && TAP_DIR=to_hub tap_has task_handoff "$TASK_D" "Stopped by controller" >/dev/null; then
        pass hub-cancel "cancel was claudectl's stop (its failed 'Stopped by controller' handoff): outcome $state"
    else
        fail hub-cancel "cancel answered $(cat "$WORK/cancel-d.out"); outcome $state; $(grep TaskInterrupt "$WORK/ctl-serve.out" | tail -n1)"
    fi
fi

# ---- (c3) a task claudectl cannot start ------------------------------------------------
# claudectl 0.64's worker answers a delegate_task whose cwd it cannot enter with nothing at
# all (it prints "Failed to accept task" and sends no handoff); our hub's timeoutSecs is what
# ends such a task.
TASK_E=""
if "$AH" delegate "${ORCH[@]}" --peer ctl --agent claude --cwd "$WORK/ctl-task/absent" \
    --prompt "interop task E" --timeout 3 >"$WORK/delegate-e.out" 2>"$WORK/delegate-e.err"; then
    TASK_E=$(head -n1 "$WORK/delegate-e.out")
fi
if [[ -z $TASK_E ]]; then
    fail hub-silent "agent-hub delegate failed: $(cat "$WORK/delegate-e.err")"
else
    "$AH" await "${ORCH[@]}" --reply-to "$TASK_E" --kind task_outcome --timeout "$WAIT" \
        >"$WORK/outcome-e.json" 2>"$WORK/outcome-e.err" || true
    state=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["body"].get("state"))' "$WORK/outcome-e.json" 2>/dev/null || echo none)
    if [[ $state == timed_out ]] && grep -q "Failed to accept task" "$WORK/ctl-serve.err"; then
        pass hub-silent "claudectl refused it silently (stderr: $(grep -m1 'Failed to accept' "$WORK/ctl-serve.err" | sed 's/^ *//')); our timeout ended it: $state"
    else
        fail hub-silent "outcome $state; claudectl: $(grep -h -A1 "$TASK_E" "$WORK/ctl-serve.out" "$WORK/ctl-serve.err" | head -n3)"
    fi
fi

# ---- (d) the lasting link was never displaced -------------------------------------------
conns=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)["dir"] == "open"))' "$WORK/tap.jsonl")
row=$(ctl_row || echo '{}')
reconnects=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("reconnects"))' "$row")
if [[ $conns == 1 && $reconnects == 0 ]] && ctl_up && ! grep -q "disconnected" "$WORK/ctl-serve.out"; then
    pass link-kept "one lasting connection through 3 one-shots and 5 tasks; status: $row"
else
    fail link-kept "tap connections $conns, status $row; claudectl: $(grep -i disconnect "$WORK/ctl-serve.out" | head -n2)"
fi

echo "interop: took $((SECONDS - T0))s"
echo "interop: $NPASS passed, $NFAIL failed, $NSKIP skipped"
((NFAIL == 0)) || exit 1
exit 0
