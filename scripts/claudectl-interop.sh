#!/usr/bin/env bash
# Interop of agent-hub's relay with the REAL claudectl, every release in a list: 0.64 (relay
# v0) and 0.92.4 (claudectl's v1: proto 1, binary frames with LZ4) by default
# (docs/relay-protocol.md "Interop with claudectl", docs/delegation.md "Across hubs";
# shared/design/relay-compat.md and relay-compat-0.92.md), on loopback only.
#
#   scripts/claudectl-interop.sh [--no-build] [--keep] [--record DIR]
#
# 1. For each version in CLAUDECTL_VERSIONS (default "~0.64 0.92.4"), installs claudectl from
#    crates.io (`cargo install --locked`) once into its own cache dir outside the repository
#    ($E2E_CACHE, default ~/.cache/agent-hub-e2e): ~0.64 (the newest 0.64.x) in
#    $E2E_CACHE/claudectl, 0.92.4 (pinned: =0.92.4) in $E2E_CACHE/claudectl-0.92, any other
#    X.Y[.Z] in $E2E_CACHE/claudectl-X.Y; reused while its version fits. `latest` (opt-in,
#    never the default: CI must be reproducible) is `cargo install claudectl` without
#    --version into $E2E_CACHE/claudectl-latest, the newest release of the day.
#    CLAUDECTL_BIN (one binary) or CLAUDECTL_BINS (a space-separated list) replace the list.
#    A version that cannot be installed (no cargo, no registry, a failed build) or that this
#    script has no expectations for (0.65 to 0.89) is SKIPped; exit 77 only if all are.
# 2. Builds agent-hub's binaries and the fake ACP agent once, before the first version that can
#    run (cargo build --release --bins -p agent-hub -p agent-hub-test-fakes; --no-build: uses
#    them), in ${CARGO_TARGET_DIR:-target}/release.
# 3. Runs each version's checks right after its install, one version after the other (a run
#    cut short keeps the results it printed), each with a fresh work dir, a fresh hub
#    and a fresh claudectl HOME (this script re-runs itself as `--one BIN` per version):
#    claudectl gets identity `ctl`, the peer `hub` (key file: the PSK as 64 hex chars, mode
#    600, and an address in peers/hub.meta, the layout `relay accept` / `relay connect`
#    write), relay config listen_addr 127.0.0.3, a 2 s heartbeat (0.90+: lan_announce off),
#    and a fake `claude` first on its PATH (a few lines of Python written there): it records
#    argv and cwd, answers `--version`, sleeps (as itself, so claudectl's kill ends it) when
#    the prompt (the LAST argument) holds HANG, and, run with `--output-format json` (0.90+),
#    prints a claude-style JSON result; 0.64 judges by the exit code only. Then `claudectl
#    relay serve --port P` on 127.0.0.3.
#    Our hub (agent-hub-server, config.example.toml on port 0, one identity `orchestrator`)
#    runs [relay] peer_id `hub` on 127.0.0.2 with one peer `ctl` (allow_claudectl = true,
#    delegate = true) dialled at tap "out" (scripts/claudectl-tap.py, 127.0.0.4) in front of
#    claudectl's serve; claudectl's peers/hub.meta names tap "in" (127.0.0.5) in front of our
#    relay listener (written once the link is up), so every connection in either direction (claudectl's one-shots, any dial
#    of its serve) is recorded, both taps into one log. The taps decode lines and, after an
#    ack agreeing `frame-bin`, binary frames, LZ4 included. [tasks] has a `claude` manifest
#    (claudectl's delegate_task names no agent, so our hub runs its default, claude) whose
#    run.acp runs target/release/fake-acp-agent with the scenario in a file: `end_turn 2` or
#    `hang`.
#
# Checks, one PASS/FAIL line each, named `[VERSION CHECK]`:
#   link-up       our status file shows peer ctl up (we dialled its serve). 0.64: proto 0 (or
#                 null), no features. 0.90+: proto 1, dialect claudectl, features with
#                 frame-bin and without mutual-auth or frame-mac.
#   ctl-delegate  `claudectl --json relay delegate hub PROMPT --cwd DIR` exits 0 and says
#                 `delegated` with its task id (0.90+: a one-shot the tap saw as transient).
#   ctl-status    claudectl's LASTING link got task_status `running` for that task (tap:
#                 lines for 0.64, frames for 0.90+); claudectl's serve logged it (0.64:
#                 "TaskStatus from hub"; 0.90+: "TASK from hub: running", and its task ledger,
#                 `relay status --json`, says running). 0.90+ writes the ledger only after
#                 its one-shot's 250 ms wait and drops a report that its 1 s serve tick sees
#                 before ("not a task we delegated, ignored"): the first task_status often
#                 goes that way, the periodic one after it counts. So the fake agent of task
#                 A waits at a gate the script opens once this check has passed (other
#                 tasks: once `relay delegate` returned), or a task settled within that
#                 window would stay `delegated` in claudectl's ledger.
#   ctl-handoff   ... and a task_handoff `completed` whose summary is the fake agent's text,
#                 logged by the serve (0.90+: the ledger says completed).
#   ctl-fast      a task whose agent finishes at once (no gate): its completed handoff
#                 reaches claudectl and (0.90+) its ledger says completed, since our hub
#                 holds reports to a claudectl peer 2 s after its delegate_task.
#   ctl-periodic  a hanging task (fake-acp-agent hang) reports task_status `running` again
#                 while it runs (tasks.peer_status_secs = 2), elapsed_secs grown.
#   ctl-interrupt that task, once running: `claudectl relay interrupt --peer hub TASK stop`
#                 (0.90+: a transient one-shot) exits 0 and the lasting link gets a `failed`
#                 handoff "Stopped by controller" (0.90+: the ledger says failed).
#   hub-delegate  `agent-hub delegate --peer ctl --agent claude` reached claudectl's serve (it
#                 logged DelegateTask) and its fake claude ran in the task's cwd with --print
#                 (0.90+: and --output-format json) and the prompt as last argument.
#   hub-outcome   `agent-hub await --reply-to TASK --kind task_outcome`: completed, peer ctl,
#                 text 0.64's "Task completed successfully", or (0.90+) the `result` of the
#                 fake claude's JSON.
#   hub-cancel    `agent-hub task cancel` of a task hanging on claudectl: claudectl logs
#                 TaskInterrupt stop, answers a failed handoff "Stopped by controller", and the
#                 outcome is `cancelled`.
#   hub-silent    (0.64) a delegate_task whose cwd claudectl cannot enter: claudectl prints
#                 "Failed to accept task" and sends nothing; our --timeout 3 ends the task
#                 `timed_out`.
#   hub-refused   (0.90+) the same task: claudectl answers a handoff with `refused: true`, and
#                 the outcome is `refused` with its reason "Could not start the task: working
#                 directory does not exist on this host: DIR", without waiting for a timeout
#                 (our --timeout is 120 s).
#   frames-lz4    (0.90+) a frame of 1 KiB or more crossed LZ4-compressed in both directions: a
#                 ~2 KiB-prompt `relay delegate` (claudectl -> hub, on its one-shot) and a
#                 ~2 KiB-prompt `agent-hub delegate --peer ctl` (hub -> claudectl, on the link);
#                 each decompresses to exactly raw_len bytes of the JSON message, and no
#                 compressed frame anywhere declares raw_len under 1024.
#   heartbeat     (0.90+) our status row's worker.capabilities has claudectl's probed `claude`
#                 present; `claudectl --json relay peers` shows headroom (running_tasks,
#                 max_tasks) for peer hub, from our beats; claudectl's serve logged no skipped
#                 message type and no heartbeat error from us.
#   link-kept     one lasting connection through all the one-shots: 0.64: tap "out" saw one
#                 connection; 0.90+: exactly one non-transient connection (either tap) became
#                 the link and is still open, one-shots counted apart. Our status says ctl up
#                 with reconnects 0 and claudectl's serve logged no disconnect.
#
# --record DIR (0.90+ only): copies into DIR/VERSION the tap log, the PSK, each connection's
# nonce/proof/ack, the status file, claudectl's log and the fake claude's calls, for turning
# into protocol/relay/ fixtures (kept whatever the checks said).
#
# Exit status: 0 all passed, 1 a check failed (or usage), 77 every version was skipped or a
# prerequisite (python3) is missing. Nothing fails for lack of network: that is a SKIP. Each
# version's work files are under a mktemp dir, removed on success, kept (path printed) on
# failure or with --keep. Every process started here is stopped by its PID on exit. Waits
# poll with timeouts; nothing sleeps to assert a speed.
#
# Environment: E2E_CACHE, CLAUDECTL_OWN_PROFILE (build claudectl with its own release profile,
# thin LTO and one codegen unit, instead of the quicker one; the behaviour is the same),
# CLAUDECTL_VERSIONS (default "~0.64 0.92.4"; CLAUDECTL_VERSION, one
# spec, is its old name), CLAUDECTL_BIN, CLAUDECTL_BINS, CLAUDECTL_TIMEOUT (per wait, default
# 60 s), CARGO_TARGET_DIR (where the built binaries are).

# Functions run through wait_until (and the EXIT trap) look unreachable to shellcheck.
# shellcheck disable=SC2317
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-hub-e2e}
WAIT=${CLAUDECTL_TIMEOUT:-60}
TARGET=${CARGO_TARGET_DIR:-target}
[[ $TARGET == /* ]] || TARGET=$ROOT/$TARGET
BIN_DIR=$TARGET/release
BUILD=1
KEEP=0
RECORD=""
ONE=""
usage() { sed -n '7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 1; }
while (($#)); do
    case $1 in
        --no-build) BUILD=0; shift ;;
        --keep) KEEP=1; shift ;;
        --record) (($# >= 2)) || usage; RECORD=$2; shift 2 ;;
        --one) (($# >= 2)) || usage; ONE=$2; shift 2 ;; # internal: one version's checks
        -h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "interop: unknown argument '$1'" >&2; usage ;;
    esac
done
if [[ -n $RECORD ]]; then
    mkdir -p "$RECORD"
    RECORD=$(cd "$RECORD" && pwd -P)
fi

PIDS=()
WORK=""
NPASS=0 NFAIL=0 NSKIP=0
# reap PID [SECONDS]: TERM, up to SECONDS (default 5) to exit, then KILL.
reap() {
    local p=$1 i
    kill -TERM "$p" 2>/dev/null || true
    for ((i = 0; i < ${2:-5} * 10; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    # A version's child gets the time to stop its own processes (each within 5 s).
    for p in ${PIDS[@]+"${PIDS[@]}"}; do reap "$p" "${REAP_SECS:-5}"; done
    [[ -z ${RESULTS:-} ]] || rm -f "$RESULTS"
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
# The version a claudectl binary reports ("0.92.4"), or nothing.
ctl_version() { "$1" --version 2>/dev/null | sed -n 's/^claudectl \([0-9][0-9.]*\).*/\1/p' | head -n1; }
# ver_ge A B: version A >= version B.
ver_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }
# Which expectations a version gets: "v0" (0.64.x), "v1" (0.90 and later), or nothing.
ctl_dialect() {
    if [[ $1 == 0.64.* ]]; then echo v0
    elif ver_ge "$1" 0.90.0; then echo v1
    fi
}

if [[ -z $ONE ]]; then
# =========================================================================================
# The list: install each version, build once, run each version's checks in a child.
# =========================================================================================
command -v python3 >/dev/null || {
    echo "SKIP: python3 not found (the taps and the checks need it)"
    echo "interop: every version skipped"
    exit 77
}
T_START=$SECONDS
say() { echo "interop: $* (at $((SECONDS - T_START))s)"; }

# A version spec's cache dir and `cargo install --version` requirement.
spec_root() {
    case $1 in
        "~0.64") echo "$E2E_CACHE/claudectl" ;; # the path the 0.64-only script used
        latest) echo "$E2E_CACHE/claudectl-latest" ;;
        *) local v=${1#[~=^]}; echo "$E2E_CACHE/claudectl-$(cut -d. -f1,2 <<<"$v")" ;;
    esac
}
spec_req() {
    case $1 in
        [~=^]*) echo "$1" ;;
        *.*.*) echo "=$1" ;; # a full version is pinned
        *) echo "~$1" ;;
    esac
}
# spec_fits VERSION SPEC
spec_fits() {
    local v=$1 s=$2
    case $s in
        latest) [[ -n $v ]] ;;
        "~"*) s=${s#"~"}; [[ $v == "$s".* || $v == "$s" ]] ;;
        "="*) [[ $v == "${s#=}" ]] ;;
        *.*.*) [[ $v == "$s" ]] ;;
        *) [[ $v == "$s".* ]] ;;
    esac
}

SKIPS=()
skip_version() { SKIPS+=("$1"); echo "SKIP [$1]"; }
# install_spec SPEC: sets FOUND to the binary, or returns 1 (with a SKIP line).
install_spec() {
    local spec=$1 root req log pid t0 v
    root=$(spec_root "$spec")
    FOUND=$root/bin/claudectl
    v=$(ctl_version "$FOUND")
    if [[ $spec != latest ]] && spec_fits "$v" "$spec"; then
        say "claudectl $spec: $v cached in $root"
        return 0
    fi
    command -v cargo >/dev/null || { skip_version "$spec: cargo not found (claudectl installs from crates.io)"; return 1; }
    mkdir -p "$root"
    log=$root/install.log
    local -a args=(install claudectl --locked --root "$root")
    if [[ $spec == latest ]]; then
        say "claudectl latest: cargo install claudectl into $root (a build only when crates.io has a newer release)"
    else
        req=$(spec_req "$spec")
        args+=(--version "$req" --force)
        say "claudectl $spec: installing $req from crates.io into $root (a release build without LTO: several minutes on 2 cores, once)"
    fi
    t0=$SECONDS
    # claudectl's own release profile (thin LTO, one codegen unit) roughly doubles the build
    # on 2 cores for speed these checks never use; the code and its behaviour are the same.
    # (CLAUDECTL_OWN_PROFILE=1 builds with its profile as shipped.)
    local -a quick=()
    [[ -n ${CLAUDECTL_OWN_PROFILE:-} ]] || quick=(--config profile.release.lto=false
        --config profile.release.codegen-units=16 --config profile.release.opt-level=1)
    timeout 1800 cargo "${quick[@]}" "${args[@]}" >"$log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    # A line a minute while it builds: how long so far and how many crates are compiled.
    while kill -0 "$pid" 2>/dev/null; do
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -0 "$pid" 2>/dev/null || break
        say "still building claudectl $spec: $(((SECONDS - t0) / 60)) min, $(grep -c '^ *Compiling' "$log" 2>/dev/null || true) crates compiled"
    done
    if ! wait "$pid"; then
        skip_version "$spec: cargo install claudectl failed: $(grep -m1 -E '^error' "$log" || tail -n1 "$log")"
        return 1
    fi
    v=$(ctl_version "$FOUND")
    spec_fits "$v" "$spec" || { skip_version "$spec: the installed claudectl is $("$FOUND" --version 2>&1 | head -n1)"; return 1; }
    say "claudectl $spec: $v ready (cargo install took $((SECONDS - t0))s)"
}

# One version after another: install it (or take the given binary), build our binaries
# before the first that can run, run its checks; so a run cut short keeps what it printed.
BUILT=0
ensure_built() {
    ((BUILT)) && return 0
    BUILT=1
    if ((BUILD)); then
        say "building agent-hub's binaries into $BIN_DIR (cargo build --release; many minutes from clean, seconds after)"
        (cd "$ROOT" && cargo build --release --bins -p agent-hub -p agent-hub-test-fakes >/dev/null 2>&1) \
            || { echo "interop: cargo build --release failed" >&2; exit 1; }
        say "built"
    fi
    local b
    for b in agent-hub agent-hub-server fake-acp-agent; do
        [[ -x $BIN_DIR/$b ]] || { echo "interop: $BIN_DIR/$b is missing (build it or drop --no-build)" >&2; exit 1; }
    done
}
RESULTS=$(mktemp "${TMPDIR:-/tmp}/agent-hub-ctl-results.XXXXXX")
REAP_SECS=60 # the parent's PIDS: an install's cargo, then each version's child
child_args=()
((KEEP)) && child_args+=(--keep)
[[ -n $RECORD ]] && child_args+=(--record "$RECORD")
any_fail=0 ran=0
run_version() { # BIN
    local b=$1 v rc=0 child
    v=$(ctl_version "$b")
    if [[ -z $v ]]; then skip_version "$b: not a claudectl binary"; return 0; fi
    if [[ -z $(ctl_dialect "$v") ]]; then
        skip_version "$v: no expectations for claudectl $v here (0.64.x and 0.90+ only)"
        return 0
    fi
    ensure_built
    say "claudectl $v ($b): the checks"
    INTEROP_RESULTS=$RESULTS bash "$0" --one "$b" ${child_args[@]+"${child_args[@]}"} &
    child=$!
    PIDS+=("$child")
    wait "$child" || rc=$?
    unset 'PIDS[${#PIDS[@]}-1]'
    ran=$((ran + 1))
    ((rc == 0)) || any_fail=1
}
if [[ -n ${CLAUDECTL_BINS:-${CLAUDECTL_BIN:-}} ]]; then
    read -ra bins <<<"${CLAUDECTL_BINS:-$CLAUDECTL_BIN}"
    for b in "${bins[@]}"; do run_version "$b"; done
else
    read -ra specs <<<"${CLAUDECTL_VERSIONS:-${CLAUDECTL_VERSION:-~0.64 0.92.4}}"
    for s in "${specs[@]}"; do
        if install_spec "$s"; then run_version "$FOUND"; fi
    done
fi
echo "interop: summary"
while read -r v np nf ns; do
    echo "interop:   claudectl $v: $np passed, $nf failed, $ns skipped"
done <"$RESULTS"
for s in ${SKIPS[@]+"${SKIPS[@]}"}; do echo "interop:   skipped $s"; done
say "done"
if ((ran == 0)); then
    echo "interop: every version skipped (${#SKIPS[@]})"
    exit 77
fi
exit $((any_fail ? 1 : 0))
fi

# =========================================================================================
# One version's checks (`--one BIN`).
# =========================================================================================
CTL=$ONE
VER=$(ctl_version "$CTL")
DIALECT=$(ctl_dialect "$VER")
V1=0
[[ $DIALECT == v1 ]] && V1=1
if ((V1)); then
    CHECKS=(link-up ctl-delegate ctl-status ctl-handoff ctl-fast ctl-periodic ctl-interrupt
        hub-delegate hub-outcome hub-cancel hub-refused frames-lz4 heartbeat link-kept)
else
    CHECKS=(link-up ctl-delegate ctl-status ctl-handoff ctl-fast ctl-periodic ctl-interrupt
        hub-delegate hub-outcome hub-cancel hub-silent link-kept)
fi
report() { [[ -n ${INTEROP_RESULTS:-} ]] && echo "$VER $NPASS $NFAIL $NSKIP" >>"$INTEROP_RESULTS"; return 0; }
pass() { NPASS=$((NPASS + 1)); echo "PASS [$VER $1] $2"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL [$VER $1] $2"; }
note() { echo "     $1"; }
# Setup failed before the checks could run: the rest are not run (counted as failed).
abort() {
    NFAIL=$((NFAIL + ${#CHECKS[@]} - NPASS - NFAIL))
    echo "interop: claudectl $VER: $NPASS passed, $NFAIL failed, $NSKIP skipped (setup failed)"
    report
    exit 1
}

AH=$BIN_DIR/agent-hub
SERVER=$BIN_DIR/agent-hub-server
FAKE=$BIN_DIR/fake-acp-agent
WORK=$(mktemp -d "${TMPDIR:-/tmp}/agent-hub-ctl-interop.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)
echo "interop: claudectl $VER ($CTL, relay $DIALECT), work in $WORK"
T0=$SECONDS

free_port() {
    python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$1"
}
KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
PY=$(python3 -c 'import sys; print(sys.executable)')
TAPLOG=("$PY" "$ROOT/scripts/claudectl-taplog.py" "$WORK/tap.jsonl")
# 0.64 marks no one-shot transient and its serve never dials: only what we dialled is the link.
((V1)) || TAPLOG+=(--link-taps out)
KIND=line
((V1)) && KIND=frame

# ---- claudectl's side -------------------------------------------------------------------
CH=$WORK/ctl-home
mkdir -p "$CH/.claudectl/relay/peers" "$CH/.config/claudectl" "$CH/bin" "$WORK/ctl-task"
printf 'ctl' >"$CH/.claudectl/relay/identity"
printf '%s' "$KEY" >"$CH/.claudectl/relay/peers/hub.key"
chmod 600 "$CH/.claudectl/relay/peers/hub.key"
{
    printf '[relay]\nlisten_addr = "127.0.0.3"\nheartbeat_interval_secs = 2\n'
    ((V1)) && printf 'lan_announce = false\n'
} >"$CH/.config/claudectl/config.toml"
RESULT_TEXT="the fake claude did the task"
cat >"$CH/bin/claude" <<EOF
#!$PY
# The fake claude claudectl's worker spawns (scripts/claudectl-interop.sh).
import json, os, sys
args = sys.argv[1:]
if args == ["--version"]:  # claudectl 0.90+ probes its tools at startup
    print("2.1.0 (Claude Code)")
    sys.exit(0)
with open("$WORK/claude-calls.jsonl", "a") as f:
    f.write(json.dumps({"cwd": os.getcwd(), "args": args, "pid": os.getpid()}) + "\n")
prompt = args[-1] if args else ""
if "HANG" in prompt:  # sleeps as this process, so claudectl's kill of its group ends it
    os.execvp("sleep", ["sleep", "600"])
if "--output-format" in args and args[args.index("--output-format") + 1:][:1] == ["json"]:
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "result": "$RESULT_TEXT (%d-byte prompt)" % len(prompt.encode()),
                      "total_cost_usd": 0, "usage": {"input_tokens": 1, "output_tokens": 2}}))
EOF
chmod 755 "$CH/bin/claude"
CTL_PORT=$(free_port 127.0.0.3)
ctl_env=(env -i HOME="$CH" PATH="$CH/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb)
(cd "$WORK/ctl-task" && exec "${ctl_env[@]}" "$CTL" relay serve --port "$CTL_PORT" \
    >"$WORK/ctl-serve.out" 2>"$WORK/ctl-serve.err") &
PIDS+=("$!")
wait_for_line "$WORK/ctl-serve.out" '/Relay listening on/p' >/dev/null \
    || { fail link-up "claudectl relay serve did not start: $(tail -n3 "$WORK/ctl-serve.err")"; abort; }

# ---- tap "out": our hub -> claudectl's serve ---------------------------------------------
"$PY" "$ROOT/scripts/claudectl-tap.py" --label out --dialer hub 127.0.0.4 127.0.0.3 "$CTL_PORT" \
    "$WORK/tap.jsonl" >"$WORK/tap-out.out" 2>"$WORK/tap-out.err" &
PIDS+=("$!")
TAP_OUT=$(wait_for_line "$WORK/tap-out.out" 's/^tap on \(.*\)$/\1/p') \
    || { fail link-up "tap out did not start: $(cat "$WORK/tap-out.err")"; abort; }

# ---- our hub ----------------------------------------------------------------------------
HD=$WORK/hub
mkdir -p "$HD/tokens" "$HD/keys" "$HD/manifests" "$WORK/hub-task"
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
printf '[agents]\norchestrator = "%s"\n' "$TOKEN" >"$HD/roster.toml"
printf '%s\n' "$TOKEN" >"$HD/tokens/orchestrator.token"
printf '%s\n' "$KEY" >"$HD/keys/ctl.key"
chmod 600 "$HD/roster.toml" "$HD/tokens/orchestrator.token" "$HD/keys/ctl.key"
echo "end_turn 2" >"$WORK/scenario"
# The gate: claudectl 0.90+ writes a delegated task into its ledger only once `relay
# delegate` has waited out its one-shot (250 ms), and drops a report that comes before as
# "not a task we delegated, ignored"; a task of ours settled that fast would stay
# `delegated` there for ever. The script closes the gate before each `relay delegate` and
# opens it when it returns (task A: once claudectl has applied a task_status), so the fake
# agent cannot finish first. A poll on a file, bounded by CLAUDECTL_TIMEOUT.
touch "$WORK/gate"
cat >"$WORK/fake-claude-acp" <<EOF
#!/bin/sh
# run.acp of the test's claude manifest: the fake ACP agent in the scenario the script sets,
# once the gate is open.
i=0
while [ ! -e "$WORK/gate" ] && [ \$i -lt $((WAIT * 10)) ]; do sleep 0.1; i=\$((i + 1)); done
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
address = "$TAP_OUT"
key_file = "keys/ctl.key"
allow_claudectl = true
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

# ---- tap "in": claudectl -> our relay listener ------------------------------------------
"$PY" "$ROOT/scripts/claudectl-tap.py" --label in --conn-base 1000 --dialer ctl 127.0.0.5 \
    "${RELAY%:*}" "${RELAY##*:}" "$WORK/tap.jsonl" >"$WORK/tap-in.out" 2>"$WORK/tap-in.err" &
PIDS+=("$!")
TAP_IN=$(wait_for_line "$WORK/tap-in.out" 's/^tap on \(.*\)$/\1/p') \
    || { fail link-up "tap in did not start: $(cat "$WORK/tap-in.err")"; abort; }
note "hub: client 127.0.0.1:$HUB_PORT, relay $RELAY behind tap $TAP_IN; claudectl serve 127.0.0.3:$CTL_PORT behind tap $TAP_OUT"
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
# row_is EXPR: the ctl row satisfies a Python expression over `r` (the row); prints it.
row_is() {
    local row
    row=$(ctl_row) || return 1
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' "$row" "$1" \
        && echo "$row"
}
row_brief() {
    ctl_row | python3 -c 'import json,sys; r=json.load(sys.stdin); w=r.pop("worker",None); print(json.dumps(r), "+ worker" if w else "")' 2>/dev/null \
        || echo 'no row'
}

# tap_has TYPE TASK WANT: a TYPE message for TASK whose payload's state (or summary) is WANT,
# toward claudectl (TAP_DIR=to_hub: from it) on the lasting link, framed as this version
# frames it; prints its payload.
tap_has() { "${TAPLOG[@]}" find --type "$1" --task "$2" --want "$3" --dir "${TAP_DIR:-to_ctl}" --kind "$KIND"; }
tap_msg() { "${TAPLOG[@]}" find --type "$1" --task "$2" --dir "${TAP_DIR:-to_ctl}"; }
serve_logged() { grep -q -- "$1" "$WORK/ctl-serve.out"; }
# claudectl's serve noted a report for TASK: 0.64 names the type, 0.90+ the task and state.
serve_report() { # TYPE(TaskStatus|TaskHandoff) TASK STATE
    if ((V1)); then serve_logged "] $2 from hub: $3"; else serve_logged "$1 from hub"; fi
}
# The fake claude's call whose last argument is PROMPT, as JSON.
claude_call() {
    python3 - "$WORK/claude-calls.jsonl" "$1" <<'PY'
import json, sys
try:
    calls = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    sys.exit(1)
for c in calls:
    if c["args"] and c["args"][-1] == sys.argv[2]:
        print(json.dumps(c)); sys.exit(0)
sys.exit(1)
PY
}
# claudectl's task ledger record for TASK (0.90+), from `relay status --json`.
ledger() {
    (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" --json relay status 2>/dev/null) \
        | python3 -c 'import json,sys; t=[r for r in json.load(sys.stdin).get("tasks",[]) if r.get("task_id")==sys.argv[1]]; print(json.dumps(t[0])) if t else sys.exit(1)' "$1"
}
ledger_is() { ledger "$1" | grep -q "\"state\": *\"$2\""; }

# ---- link-up ----------------------------------------------------------------------------
if ((V1)); then
    LINK_OK='r.get("state") == "up" and r.get("proto") == 1 and r.get("dialect") == "claudectl" and "frame-bin" in r.get("features", []) and not {"mutual-auth", "frame-mac"} & set(r.get("features", []))'
else
    LINK_OK='r.get("state") == "up" and r.get("proto") in (0, None) and not r.get("features")'
fi
if wait_until row_is "$LINK_OK"; then
    pass link-up "peer ctl up: $(row_brief)"
else
    fail link-up "peer ctl not up as expected ($LINK_OK): $(row_brief)"
fi

# Where claudectl dials us: tap "in". Written once the link is up, since claudectl 0.90+
# rewrites peers/hub.meta when our dial's handshake carries a listen_port
# (<observed ip>:<port>, the observed ip being the tap's 127.0.0.1, where nothing listens).
printf '{"addr":"%s","last_seen":0}' "$TAP_IN" >"$CH/.claudectl/relay/peers/hub.meta"
advertised=$("${TAPLOG[@]}" find --type handshake --dir to_ctl --where any 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin).get("listen_port") or "")' 2>/dev/null || true)
[[ -z $advertised ]] || note "our hub's handshake to claudectl advertised listen_port $advertised though its relay listens on $RELAY only; claudectl takes it as <the ip it sees us from>:$advertised"

# ---- (a) claudectl delegates to our hub -------------------------------------------------
# `claudectl --json relay delegate` (both releases print {"task_id","status":"delegated",..};
# the text form is "Task X delegated to peer hub").
ctl_delegate() { # PROMPT NAME [keep-gate|no-gate]: prints the task id
    local rc=0
    [[ ${3:-} == no-gate ]] || rm -f "$WORK/gate"
    (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" --json relay delegate hub "$1" --cwd "$WORK/hub-task") \
        >"$WORK/$2.out" 2>"$WORK/$2.err" || rc=1
    [[ ${3:-} == keep-gate && $rc == 0 ]] || touch "$WORK/gate"
    ((rc == 0)) || return 1
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["task_id"]) if d.get("status")=="delegated" and d.get("peer")=="hub" else sys.exit(1)' "$WORK/$2.out" 2>/dev/null \
        || sed -n 's/^Task \([^ ]*\) delegated to peer hub$/\1/p' "$WORK/$2.out"
}
# The connection a one-shot's delegate_task (or interrupt) for TASK came on, as "conn N
# transient T".
oneshot_of() { # TYPE TASK
    local rec
    rec=$(TAP_DIR=to_hub "${TAPLOG[@]}" find --type "$1" --task "$2" --dir to_hub --where any --full) || return 1
    python3 - "$rec" "$WORK/tap.jsonl" <<'PY'
import json, sys
rec = json.loads(sys.argv[1])
opens = [json.loads(l) for l in open(sys.argv[2])]
o = [r for r in opens if r["conn"] == rec["conn"] and r["dir"] == "open"]
print("conn %s (tap %s) transient=%s, a %s" % (rec["conn"], rec.get("tap"), o[0].get("transient") if o else None, rec["kind"]))
PY
}
TASK_A=$(ctl_delegate "interop task A: say done" delegate-a keep-gate || true)
if [[ -n $TASK_A ]]; then
    how=$(oneshot_of delegate_task "$TASK_A" || echo "not seen by tap in")
    if ((V1)) && [[ $how != *transient=True* ]]; then
        fail ctl-delegate "claudectl relay delegate sent $TASK_A, but not on a transient one-shot: $how"
    else
        pass ctl-delegate "claudectl --json relay delegate: $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$WORK/delegate-a.out" 2>/dev/null || head -n1 "$WORK/delegate-a.out"); $how"
    fi
    # 0.90+: the task_status sent at once is usually dropped (the ledger is not written yet);
    # the periodic one after it (tasks.peer_status_secs = 2) is applied.
    if wait_until tap_has task_status "$TASK_A" running && wait_until serve_report TaskStatus "$TASK_A" running \
        && { ((!V1)) || wait_until ledger_is "$TASK_A" running; }; then
        pass ctl-status "task_status running reached claudectl's lasting link (${KIND}s): $(tap_msg task_status "$TASK_A")$( ((V1)) && printf '; claudectl: %s' "$(grep -F "$TASK_A" "$WORK/ctl-serve.out" | sed 's/^\[[^]]*\] //' | paste -sd'|')")"
    else
        fail ctl-status "no task_status running for $TASK_A on the lasting link as ${KIND}s: $(tap_msg task_status "$TASK_A" || echo none); serve: $(grep -F "$TASK_A" "$WORK/ctl-serve.out" | head -n2 | paste -sd'|')"
    fi
    touch "$WORK/gate"
    if wait_until tap_has task_handoff "$TASK_A" completed && wait_until serve_report TaskHandoff "$TASK_A" completed \
        && { ((!V1)) || wait_until ledger_is "$TASK_A" completed; }; then
        extra=""
        ((V1)) && extra="; claudectl's ledger: $(ledger "$TASK_A" | cut -c1-300)"
        pass ctl-handoff "completed handoff reached claudectl: $(tap_msg task_handoff "$TASK_A")$extra"
    else
        fail ctl-handoff "no completed task_handoff for $TASK_A: $(tap_msg task_handoff "$TASK_A" || echo none); serve: $(grep -F "$TASK_A" "$WORK/ctl-serve.out" | tail -n1); ledger: $( ((V1)) && ledger "$TASK_A")"
    fi
else
    fail ctl-delegate "claudectl relay delegate failed: $(cat "$WORK/delegate-a.err" "$WORK/delegate-a.out")"
    fail ctl-status "no task"
    fail ctl-handoff "no task"
fi

# ---- (a2) a task done at once, no gate: the hub holds its reports 2 s ----------------------
# claudectl 0.90+ would drop a handoff that reached it before its ledger had the task; our hub
# sends no report about a claudectl peer's task sooner than 2 s after its delegate_task
# (tasks::peer::CLAUDECTL_REPORT_DELAY), so the fake agent may finish at once.
TASK_F=$(ctl_delegate "interop task F: done at once" delegate-f no-gate || true)
if [[ -z $TASK_F ]]; then
    fail ctl-fast "claudectl relay delegate failed: $(cat "$WORK/delegate-f.err")"
elif wait_until tap_has task_handoff "$TASK_F" completed && wait_until serve_report TaskHandoff "$TASK_F" completed \
    && { ((!V1)) || wait_until ledger_is "$TASK_F" completed; }; then
    pass ctl-fast "a task done at once reached claudectl completed$( ((V1)) && printf '; its ledger: %s' "$(ledger "$TASK_F" | cut -c1-200)")"
else
    fail ctl-fast "the handoff of $TASK_F: $(tap_msg task_handoff "$TASK_F" || echo none); serve: $(grep -F "$TASK_F" "$WORK/ctl-serve.out" | tail -n2 | paste -sd'|'); ledger: $( ((V1)) && ledger "$TASK_F")"
fi

# A ~2 KiB prompt each way, compressible: claudectl compresses JSON of 1024 bytes or more.
BIG_CTL="interop task L (lz4 toward the hub):$(printf ' line %03d of a long prompt.' $(seq 1 80))"
BIG_HUB="interop task M (lz4 toward claudectl):$(printf ' line %03d of a long prompt.' $(seq 1 80))"
TASK_L=""
if ((V1)); then
    TASK_L=$(ctl_delegate "$BIG_CTL" delegate-l || true)
    if [[ -n $TASK_L ]]; then wait_until tap_has task_handoff "$TASK_L" completed || true; fi
fi

# ---- (b) claudectl stops a hanging task -------------------------------------------------
echo "hang" >"$WORK/scenario"
TASK_B=$(ctl_delegate "interop task B: hang until stopped" delegate-b || true)
if [[ -z $TASK_B ]]; then
    fail ctl-periodic "claudectl relay delegate failed: $(cat "$WORK/delegate-b.err")"
    fail ctl-interrupt "no task"
elif ! wait_until tap_has task_status "$TASK_B" running; then
    fail ctl-periodic "task $TASK_B never reported running"
    fail ctl-interrupt "task $TASK_B never reported running"
else
    # tasks.peer_status_secs = 2: another task_status while it runs, elapsed_secs grown.
    if wait_until "${TAPLOG[@]}" elapsed --task "$TASK_B" --n 2; then
        pass ctl-periodic "the running task reported again: $("${TAPLOG[@]}" elapsed --task "$TASK_B" --n 2)"
    else
        fail ctl-periodic "no second task_status for $TASK_B: $("${TAPLOG[@]}" elapsed --task "$TASK_B" --n 2)"
    fi
    if ! (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" relay interrupt --peer hub "$TASK_B" stop interop test) \
        >"$WORK/interrupt.out" 2>"$WORK/interrupt.err"; then
        fail ctl-interrupt "claudectl relay interrupt failed: $(cat "$WORK/interrupt.err")"
    elif wait_until tap_has task_handoff "$TASK_B" "Stopped by controller" \
        && tap_has task_handoff "$TASK_B" failed >/dev/null \
        && { ((!V1)) || wait_until ledger_is "$TASK_B" failed; }; then
        how=$(oneshot_of task_interrupt "$TASK_B" || echo "not seen by tap in")
        if ((V1)) && [[ $how != *transient=True* ]]; then
            fail ctl-interrupt "the stop worked but did not come on a transient one-shot: $how"
        else
            pass ctl-interrupt "stop ($how) gave a failed handoff on the link: $(tap_msg task_handoff "$TASK_B")"
        fi
    else
        fail ctl-interrupt "no failed 'Stopped by controller' handoff for $TASK_B on the link: $(tap_msg task_handoff "$TASK_B" || echo none)"
    fi
fi
echo "end_turn 2" >"$WORK/scenario"

# ---- (c) our hub delegates to claudectl's serve -----------------------------------------
hub_delegate() { # NAME CWD TIMEOUT PROMPT: prints the task id
    "$AH" delegate "${ORCH[@]}" --peer ctl --agent claude --cwd "$2" --prompt "$4" --timeout "$3" \
        >"$WORK/delegate-$1.out" 2>"$WORK/delegate-$1.err" && head -n1 "$WORK/delegate-$1.out"
}
hub_await() { # NAME TASK
    "$AH" await "${ORCH[@]}" --reply-to "$2" --kind task_outcome --timeout "$WAIT" \
        >"$WORK/outcome-$1.json" 2>"$WORK/outcome-$1.err" || true
}
# outcome_is NAME TASK EXPR: the task_outcome envelope's body `b` satisfies EXPR; prints
# "PASS|FAIL <envelope>".
outcome_is() {
    TASK=$2 python3 - "$WORK/outcome-$1.json" "$3" <<'PY'
import json, os, sys
try:
    env = json.loads(open(sys.argv[1]).readline())
except (OSError, ValueError):
    print("FAIL no task_outcome envelope"); sys.exit()
b = env.get("body", {})
ok = (env.get("kind") == "task_outcome"
      and env.get("correlationId", env.get("correlation_id")) == os.environ["TASK"]
      and b.get("peer") == "ctl" and eval(sys.argv[2]))
print(("PASS " if ok else "FAIL ") + json.dumps(env)[:500])
PY
}
PROMPT_C="interop task C from agent-hub"
TASK_C=$(hub_delegate c "$WORK/ctl-task" 120 "$PROMPT_C" || true)
if [[ -z $TASK_C ]]; then
    fail hub-delegate "agent-hub delegate --peer ctl failed: $(cat "$WORK/delegate-c.err")"
    fail hub-outcome "no task"
else
    hub_await c "$TASK_C"
    call=$(claude_call "$PROMPT_C" || true)
    want_args='"--print" in c["args"]'
    ((V1)) && want_args+=' and "--output-format json" in " ".join(c["args"])'
    if serve_logged "DelegateTask '$TASK_C' from hub" && [[ -n $call ]] \
        && python3 -c 'import json,sys; c=json.loads(sys.argv[1]); sys.exit(0 if c["cwd"]==sys.argv[2] and eval(sys.argv[3]) else 1)' \
            "$call" "$WORK/ctl-task" "$want_args"; then
        pass hub-delegate "claudectl's serve ran its claude for $TASK_C: $call"
    else
        fail hub-delegate "claudectl did not run the task as expected ($want_args, cwd $WORK/ctl-task): $(grep -i delegate "$WORK/ctl-serve.out" | tail -n2); call: ${call:-none}"
    fi
    if ((V1)); then
        want_text="$RESULT_TEXT (${#PROMPT_C}-byte prompt)"
        verdict=$(WANT=$want_text outcome_is c "$TASK_C" 'b.get("state") == "completed" and b.get("text") == os.environ["WANT"]')
    else
        verdict=$(outcome_is c "$TASK_C" 'b.get("state") == "completed" and "Task completed successfully" in json.dumps(b)')
    fi
    if [[ $verdict == PASS* ]]; then
        pass hub-outcome "task_outcome for $TASK_C: ${verdict#PASS }"
    else
        fail hub-outcome "${verdict#FAIL }; $(cat "$WORK/outcome-c.err")"
    fi
fi

TASK_M=""
if ((V1)); then
    TASK_M=$(hub_delegate m "$WORK/ctl-task" 120 "$BIG_HUB" || true)
    [[ -n $TASK_M ]] && hub_await m "$TASK_M"
fi

# ---- (c2) our hub cancels a task running on claudectl -----------------------------------
# `agent-hub task cancel` sends task_interrupt stop on the lasting link; claudectl's worker
# kills its claude and answers a failed handoff "Stopped by controller": outcome cancelled.
PROMPT_D="interop task D: HANG"
TASK_D=$(hub_delegate d "$WORK/ctl-task" 120 "$PROMPT_D" || true)
d_running() { "$AH" task status "${ORCH[@]}" --id "$TASK_D" | grep -q '"state":"running"'; }
d_started() { claude_call "$PROMPT_D"; }
if [[ -z $TASK_D ]]; then
    fail hub-cancel "agent-hub delegate failed: $(cat "$WORK/delegate-d.err")"
elif ! wait_until d_started || ! wait_until d_running; then
    fail hub-cancel "task $TASK_D never ran on claudectl: $("$AH" task status "${ORCH[@]}" --id "$TASK_D" 2>&1)"
else
    "$AH" task cancel "${ORCH[@]}" --id "$TASK_D" >"$WORK/cancel-d.out" 2>&1 || true
    hub_await d "$TASK_D"
    state=$(python3 -c 'import json,sys; b=json.loads(open(sys.argv[1]).readline())["body"]; print(b.get("state"), "|", b.get("reason", b.get("text")))' "$WORK/outcome-d.json" 2>/dev/null || echo none)
    if [[ $state == cancelled* ]] && serve_logged "TaskInterrupt '$TASK_D' (stop) from hub" \
        && TAP_DIR=to_hub tap_has task_handoff "$TASK_D" "Stopped by controller" >/dev/null; then
        pass hub-cancel "cancel was claudectl's stop (its failed 'Stopped by controller' handoff on the link): outcome $state"
    else
        fail hub-cancel "cancel answered $(cat "$WORK/cancel-d.out"); outcome $state; $(grep TaskInterrupt "$WORK/ctl-serve.out" | tail -n1); handoff: $(TAP_DIR=to_hub tap_msg task_handoff "$TASK_D" || echo none)"
    fi
fi

# ---- (c3) a task claudectl cannot start ------------------------------------------------
ABSENT=$WORK/ctl-task/absent
if ((V1)); then
    # 0.90+ answers a task it cannot start with a handoff `refused: true`, "Could not start
    # the task: <why>": the outcome is `refused` with that reason, long before our timeout.
    t_e=$SECONDS
    TASK_E=$(hub_delegate e "$ABSENT" 120 "interop task E" || true)
    if [[ -z $TASK_E ]]; then
        fail hub-refused "agent-hub delegate failed: $(cat "$WORK/delegate-e.err")"
    else
        hub_await e "$TASK_E"
        want_reason="Could not start the task: working directory does not exist on this host: $ABSENT"
        verdict=$(WANT=$want_reason outcome_is e "$TASK_E" 'b.get("state") == "refused" and os.environ["WANT"] in (b.get("reason") or "")')
        handoff=$(TAP_DIR=to_hub tap_msg task_handoff "$TASK_E" || echo none)
        if [[ $verdict == PASS* && $handoff == *'"refused": true'* ]]; then
            pass hub-refused "claudectl's refused handoff ($handoff) settled it in $((SECONDS - t_e))s of a 120 s timeout: ${verdict#PASS }"
        else
            fail hub-refused "${verdict#* }; claudectl's handoff: $handoff; $(grep -h -A1 "$TASK_E" "$WORK/ctl-serve.out" "$WORK/ctl-serve.err" | head -n3)"
        fi
    fi
else
    # claudectl 0.64's worker answers a delegate_task whose cwd it cannot enter with nothing
    # at all (it prints "Failed to accept task" and sends no handoff); our hub's timeoutSecs
    # is what ends such a task.
    TASK_E=$(hub_delegate e "$ABSENT" 3 "interop task E" || true)
    if [[ -z $TASK_E ]]; then
        fail hub-silent "agent-hub delegate failed: $(cat "$WORK/delegate-e.err")"
    else
        hub_await e "$TASK_E"
        state=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["body"].get("state"))' "$WORK/outcome-e.json" 2>/dev/null || echo none)
        if [[ $state == timed_out ]] && grep -q "Failed to accept task" "$WORK/ctl-serve.err"; then
            pass hub-silent "claudectl refused it silently (stderr: $(grep -m1 'Failed to accept' "$WORK/ctl-serve.err" | sed 's/^ *//')); our timeout ended it: $state"
        else
            fail hub-silent "outcome $state; claudectl: $(grep -h -A1 "$TASK_E" "$WORK/ctl-serve.out" "$WORK/ctl-serve.err" | head -n3)"
        fi
    fi
fi

# ---- (e) 0.90+: LZ4 frames both ways, and the heartbeats -------------------------------
if ((V1)); then
    to_hub=$("${TAPLOG[@]}" lz4 --dir to_hub --type delegate_task --contains "line 080 of a long prompt" || true)
    to_ctl=$("${TAPLOG[@]}" lz4 --dir to_ctl --type delegate_task --contains "line 080 of a long prompt" || true)
    if [[ -n $TASK_L && -n $TASK_M && $to_hub == conn* && $to_ctl == conn* ]] \
        && claude_call "$BIG_HUB" >/dev/null; then
        pass frames-lz4 "claudectl -> hub: $to_hub; hub -> claudectl: $to_ctl; every compressed frame decompresses to its raw_len (>= 1024) of JSON"
    else
        fail frames-lz4 "tasks L=${TASK_L:-none} M=${TASK_M:-none}; to hub: $to_hub; to claudectl: $to_ctl; the big prompt ran: $(claude_call "$BIG_HUB" >/dev/null && echo yes || echo no)"
    fi

    caps_ok='(r.get("worker") or {}).get("capabilities", {}).get("tools", {}).get("claude", {}).get("state") == "present"'
    peers_headroom() {
        (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" --json relay peers 2>/dev/null) \
            | python3 -c 'import json,sys; p=[x for x in json.load(sys.stdin)["peers"] if x["peer_id"]=="hub"]; h=p[0].get("headroom") if p else None; print(json.dumps(h)) if isinstance(h,dict) and "running_tasks" in h and "max_tasks" in h else sys.exit(1)'
    }
    complaints=$(grep -hiE "unknown message type|heartbeat.*(error|invalid|malformed|bad|fail)|(error|invalid|malformed|bad|fail).*heartbeat" \
        "$WORK/ctl-serve.out" "$WORK/ctl-serve.err" | head -n3 || true)
    if wait_until row_is "$caps_ok" && wait_until peers_headroom && [[ -z $complaints ]]; then
        pass heartbeat "our row's worker.capabilities: $(ctl_row | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["worker"]["capabilities"]))'); claudectl's relay peers: headroom $(peers_headroom)"
    else
        fail heartbeat "worker: $(ctl_row | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin).get("worker")))' 2>/dev/null); claudectl's headroom for hub: $(peers_headroom || (cd "$WORK/ctl-task" && "${ctl_env[@]}" "$CTL" --json relay peers 2>&1 | tr -d '\n ' | cut -c1-300)); claudectl complained: ${complaints:-nothing}"
    fi
fi

# ---- (d) the lasting link was never displaced -------------------------------------------
"${TAPLOG[@]}" conns >"$WORK/conns.jsonl" || true
row=$(ctl_row || echo '{}')
reconnects=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("reconnects"))' "$row")
kept=$(python3 - "$WORK/conns.jsonl" "$V1" <<'PY'
import json, sys
conns = [json.loads(l) for l in open(sys.argv[1])]
v1 = sys.argv[2] == "1"
lasting = [c for c in conns if c["lasting"]]
oneshots = [c for c in conns if not c["lasting"]]
ok = len(lasting) == 1 and not lasting[0]["closed"]
if not v1:
    ok = ok and sum(1 for c in conns if c["tap"] == "out") == 1
desc = "%d lasting (%s), %d one-shots (%d transient, %d closed)" % (
    len(lasting), ", ".join("conn %s tap %s%s" % (c["conn"], c["tap"], " closed" if c["closed"] else " open") for c in lasting),
    len(oneshots), sum(1 for c in oneshots if c["transient"]), sum(1 for c in oneshots if c["closed"]))
print(("OK " if ok else "NO ") + desc)
PY
)
if [[ $kept == OK* && $reconnects == 0 ]] && ctl_up && ! grep -q "disconnected" "$WORK/ctl-serve.out"; then
    pass link-kept "${kept#OK }; status: $(row_brief)"
else
    fail link-kept "${kept#?? }; status $(row_brief); claudectl: $(grep -i disconnect "$WORK/ctl-serve.out" | head -n2)"
fi
tap_errors=$("${TAPLOG[@]}" errors || true)
[[ -z $tap_errors ]] || note "the tap could not parse: $tap_errors"

# ---- --record DIR: the run's wire, for protocol/relay/ fixtures -------------------------
if ((V1)) && [[ -n $RECORD ]]; then
    R=$RECORD/$VER
    rm -rf "$R"
    mkdir -p "$R"
    cp "$WORK/tap.jsonl" "$WORK/conns.jsonl" "$R/"
    cp "$WORK/ctl-serve.out" "$R/ctl-serve.log"
    cp "$HD/relay-status.json" "$R/relay-status.json" 2>/dev/null || true
    cp "$WORK/claude-calls.jsonl" "$R/claude-calls.jsonl" 2>/dev/null || true
    printf '%s\n' "$KEY" >"$R/psk.hex"
    "$PY" - "$WORK/tap.jsonl" "$KEY" >"$R/handshakes.jsonl" <<'PY'
import hmac, hashlib, json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
key = bytes.fromhex(sys.argv[2])
by = {}
for r in recs:
    if r["dir"] not in ("to_ctl", "to_hub") or r.get("kind") != "line":
        continue
    try:
        m = json.loads(r["line"])
    except ValueError:
        continue
    c = by.setdefault(r["conn"], {"conn": r["conn"], "tap": r.get("tap")})
    t, p = m.get("msg_type"), m.get("payload", {})
    if t == "challenge":
        c.update(challenge_dir=r["dir"], challenge_from=m.get("from_peer"), nonce=p.get("nonce"))
    elif t == "handshake":
        c.update(dialler=m.get("from_peer"), handshake=p)
    elif t == "handshake_ack":
        c.update(acceptor=m.get("from_peer"), ack=p)
for c in by.values():
    if c.get("nonce") and c.get("handshake"):
        want = hmac.new(key, c["nonce"].encode(), hashlib.sha256).hexdigest()
        c["proof_ok"] = c["handshake"].get("proof") == want
    print(json.dumps(c))
PY
    cat >"$R/README.txt" <<EOF
claudectl $VER against agent-hub ($("$AH" --version 2>/dev/null | head -n1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)), recorded $(date -u +%Y-%m-%dT%H:%M:%SZ)
by scripts/claudectl-interop.sh --record: $NPASS checks passed, $NFAIL failed before link-kept.

psk.hex           the pre-shared key of the pair (hub = our hub "hub", ctl = claudectl "ctl"), 64 hex
tap.jsonl         every message both ways, as scripts/claudectl-tap.py records them:
                  tap "out" (conns 1..): our hub dialled claudectl's serve;
                  tap "in" (conns 1001..): claudectl (its one-shots) dialled our relay.
                  "hex" is the exact wire bytes (a line with its \n, a frame with its header);
                  "line" the JSON (a compressed frame's decompressed body).
handshakes.jsonl  per connection: the challenge nonce, the dialler's handshake payload (proof,
                  version, proto, features, transient), the ack; proof_ok = HMAC-SHA256(psk,
                  nonce text) matched.
conns.jsonl       per connection: transient, lasting, framing, closed.
relay-status.json our hub's status file at the end (its row for ctl: proto, features, dialect,
                  worker = claudectl's beats).
ctl-serve.log     claudectl relay serve's stdout.
claude-calls.jsonl how claudectl's worker ran the fake claude (cwd, argv).
Tasks: A=$TASK_A (ctl->hub, completed) L=$TASK_L (ctl->hub, ~2 KiB prompt, compressed)
B=${TASK_B:-} (ctl->hub, stopped by relay interrupt) C=${TASK_C:-} (hub->ctl, completed)
M=$TASK_M (hub->ctl, ~2 KiB prompt, compressed) D=${TASK_D:-} (hub->ctl, cancelled)
E=${TASK_E:-} (hub->ctl, refused: cwd absent).
EOF
    note "recorded the wire into $R"
fi

echo "interop: claudectl $VER took $((SECONDS - T0))s: $NPASS passed, $NFAIL failed, $NSKIP skipped"
report
((NFAIL == 0)) || exit 1
exit 0
