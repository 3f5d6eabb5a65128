#!/usr/bin/env bash
# End-to-end check of agent-hub with REAL agent CLIs, offline, against a loopback mock LLM.
#
#   scripts/e2e-agents.sh [--agent claude|codex|gemini|opencode|all]... [--phase hook|task|headless|all]
#                         [--set pinned|current] [--no-build] [--keep] [--trace-net]
#
# Two release sets (--set, or E2E_SET; default pinned):
#   pinned   the versions below, fixed so CI is reproducible: Claude Code 2.1.197, Codex
#            0.171.0, Gemini CLI 0.61.0, OpenCode 1.18.33; the task phase's adapters
#            @zed-industries/claude-agent-acp 0.23.1 (its bundled Claude Code 2.1.83) and
#            @zed-industries/codex-acp 0.16.0 (its bundled Codex).
#   current  what npm's registry calls latest when the run starts (`npm view PKG version`,
#            printed in the banner), with the maintained adapters
#            @agentclientprotocol/claude-agent-acp and @agentclientprotocol/codex-acp, each
#            running the current CLI of the hook phase (CLAUDE_CODE_EXECUTABLE, CODEX_PATH) rather
#            than the one it bundles. A version that cannot be looked up is a SKIP.
#   E2E_*_VERSION, E2E_*_ACP_VERSION and E2E_{CLAUDE,CODEX}_ACP_PKG override either set.
#
# Two phases per agent (--phase, default all): "hook" runs the agent CLI headless, wired up by
# `agent-hub install` (steps 1-7 below); "task" has the hub run it as a delegated task through
# ACP (steps T1-T5 after the hook checks); "headless" (claude only; issue 37 design §6) has the
# hub run the built-in claude headless (`claude -p`, its ACP adapter kept off the hub's PATH)
# with the hub's MCP server and `--permission-prompt-tool mcp__<server>__permission_prompt`:
# the model's Bash call reaches the delegator as a task_request, answered allow (the command
# runs: headless-ask-allow) and deny with a message (it does not, and the model reads the
# message: headless-ask-deny), each agent reaped after (headless-ask-*-reaped).
#
# For each agent (default: claude) the hook phase:
#   1. builds target/release/{agent-hub,agent-hub-server} (cargo build --release; --no-build
#      uses what is there), and installs the agent CLI from npm, pinned to the version the
#      facts file verified, into a cache OUTSIDE the repository
#      ($E2E_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/agent-hub-e2e; reused when present);
#   2. starts a fresh hub (`agent-hub-server demo DIR --port 0`; the port is read from its
#      "listening on 127.0.0.1:PORT" line) with identities `worker` and `orchestrator`;
#   3. starts the shared mock LLM (../shared/tools/mock_llm.py, or $E2E_MOCK_LLM) on a free
#      127.0.0.1 port through scripts/e2e-mock-llm.py, a wrapper that (a) gives the mock's
#      tool call the arguments the hub's `send` needs (the mock itself always sends
#      {"text":"ping-from-mock"}, which `send` refuses) and (b) holds the model's answer to the
#      tool result until the script says go (see below), and logs every request body;
#   4. makes a temporary HOME, writes only what points the agent at the mock (Codex provider,
#      Gemini auth type, OpenCode provider; telemetry, update checks and plugin sync off), and
#      runs `agent-hub install --agent NAME --as worker ...` there: the MCP server and the Stop
#      (Gemini: AfterAgent) hook or the OpenCode plugin come from agent-hub's own installer,
#      nothing is hand-written;
#   5. runs the agent headless (`claude -p`, `codex exec`, `gemini -p`; OpenCode as
#      `opencode serve` prompted over its HTTP API by scripts/e2e-opencode.py, since
#      `opencode run` exits before a plugin-injected turn runs) with the prompt
#      "CALL_TOOL:send", in a clean environment (env -i) and its own process group. The mock
#      makes the model call the hub's send tool, through `agent-hub mcp`, to `orchestrator`;
#   6. meanwhile, as `orchestrator`, awaits that envelope, then sends a reply to `worker`
#      (`agent-hub send`, correlation id = the agent's envelope) and only then lets the mock
#      answer the tool result, so the reply is queued before the agent's turn can end;
#   7. the agent's turn ends, the installed hook (`agent-hub hook stop`) takes the reply and
#      blocks with it; the agent runs a second turn with it; at the next stop there is no new
#      mail and the agent exits. OpenCode: the session goes idle, the installed plugin runs
#      `agent-hub drain --confirm`, prompts the session with the text (promptAsync) and
#      confirms; the second turn runs; at the next idle there is no mail; e2e-opencode.py
#      waits until the session has been idle and unchanged for 3 s, then stops the server.
#
# Checks, one PASS/FAIL line each:
#   install        agent-hub install exited 0 and wrote the MCP server and the hook (plugin)
#   agent-exit     the agent exited 0 within $E2E_AGENT_TIMEOUT seconds (default 180)
#   mcp-tool       the mock offered and called the hub's send tool under the agent's own name
#                  (mcp__agent-hub__send, mcp__agent_hub::send, mcp_agent-hub_send,
#                  agent-hub_send)
#   hub-envelope   orchestrator received the agent's envelope: from worker, kind e2e-ping, body
#                  exactly the one the model sent
#   tool-result    the next model request carried the hub's answer (the envelope id) as the
#                  tool result
#   hook-feedback  a later model request holds the Stop-hook feedback: the reply's body, its id
#                  and `from "orchestrator"` (from the mock's own MOCK_LOG where it shows it; Codex
#                  wraps hook text in <hook_prompt>, which the mock's log skips, so there the
#                  wrapper's request log is read; OpenCode gets the plugin's text as a plain
#                  user message)
#   second-turn    the agent's final answer is the mock's answer to that feedback request
#   plugin-inject  (OpenCode) the session's second user message is that drained text
#   reply-acked    the hub reports the reply `acked` (agent-hub status): by the hook, or by the
#                  plugin's `drain --confirm` once promptAsync took the text
#   hook-bounded   the hook then let the agent stop: no model request after the feedback turn
#   liveness-busy  (Claude, Gemini, OpenCode) mid-turn, `who` shows worker busy (the turn-start
#                  hook; OpenCode's plugin on session.status busy)
#   liveness-gone  (Claude, Gemini, Codex, OpenCode) within 10 s of the agent's exit `who`
#                  shows worker gone (SessionEnd hook, or the hub's check of the process the
#                  hooks or the plugin named)
#   loopback-only  (--trace-net, needs strace) the agent connected to no address but 127.0.0.1
#                  (hook phase only)
#
# The task phase (docs/delegation.md "Real agents"):
#   T1. installs the agent's ACP entry point (its built-in manifest's run.acp) like the CLIs:
#       Claude Code through @zed-industries/claude-agent-acp, Codex through
#       @zed-industries/codex-acp (both pinned below), Gemini CLI as `gemini --acp` and
#       OpenCode as `opencode acp` from the packages above;
#   T2. starts the mock LLM (its tool call: the hub's send to `orchestrator`) and a hub from
#       config.example.toml on port 0 with one identity, `orchestrator`, and a [tasks] table:
#       cwd_roots a temp folder, tasks.env_pass naming the mock's endpoint and key variables,
#       and the default permission (ask) for Claude Code and Gemini CLI, whose requests for
#       the hub's own send tool the hub recognises and allows under every policy, or
#       permission "allow" for Codex and OpenCode, whose requests for it it cannot tell from
#       another tool's. The hub itself runs under env -i with only those and HOME/PATH (the
#       adapter's folder), so the agent sees nothing else;
#   T3. task 1: `agent-hub delegate --wait --json` with the prompt "…CALL_TOOL:send"; while it
#       waits, orchestrator awaits the agent's mail (kind e2e-task-mail);
#   T4. task 2: the same prompt with the mock holding its answer to the tool result; once the
#       mail from the task is in (so the turn is open), `agent-hub task cancel`, then
#       `agent-hub await --reply-to TASK --kind task_outcome`;
#   T5. each task's agent must be gone: the hub logged its exit and no process carries the
#       task's mark (AGENT_HUB_TASK=<task id> in its environment). Task 2's hub is stopped
#       (SIGTERM) right after the cancelled outcome, so its reap is the hub's shutdown's.
#   T6. (Claude Code, Gemini CLI; issue 37) a fresh mock whose tool call runs a shell command
#       that writes proof.txt (Bash, run_shell_command) and a hub under the default
#       permission (ask): task 4's request reaches the delegator as a task_request envelope
#       (`agent-hub await --kind task_request`) and is answered with `agent-hub task answer`
#       choosing the agent's allow_once option, task 5's with its reject_once option;
#   T7. (Claude Code through @agentclientprotocol/claude-agent-acp, the current set) task 6:
#       the model calls AskUserQuestion, the adapter asks it as an elicitation/create form
#       (the hub advertises forms under ask), the delegator gets a task_request of type
#       question and accepts it with --message '{"question_0":"Blue"}'.
#   task-mail          orchestrator got the model's send from task-<hex>: kind, body exact
#   task-tool-result   the model got the envelope id back as the tool result
#   task-completed     delegate --wait exited 0; the task_outcome envelope (from hub,
#                      correlationId the task) says completed, end_turn, and its text ends with
#                      the mock's answer to the request that carried the send's result back
#                      (the turn's end; later side requests do not count)
#   task-reaped        task 1's agent was reaped and left no process behind
#   task-cancelled     cancel answered `cancelling`; the outcome says `cancelled`
#   task-cancel-reaped task 2's agent was reaped, by a hub stopped right after its outcome,
#                      and left no process behind
#   task-reject        task 3, the same prompt under permission = "reject": the agent was put
#                      in its asking mode and asked the hub for its send tool. Claude and
#                      Gemini name the hub's tool by a field the hub recognises (issue 37,
#                      docs/acp.md "The hub's own tools"), so the hub allowed it under every
#                      policy and the mail arrived; for the others the hub rejected it and no
#                      mail arrived
#   task-reject-reaped task 3's agent was reaped and left no process behind
#   task-ask-allow     task 4: the request to run the command reached the delegator (from hub,
#                      kind task_request, correlationId the task, type permission, kind
#                      execute, the command shown), `task answer` with the allow_once option
#                      was taken, the agent ran it (proof.txt exists), the task completed
#   task-ask-reject    task 5: the same answered with the reject_once option: no proof.txt,
#                      the task completed
#   task-question      task 6: the question (message, schema, options accept/decline/cancel)
#                      reached the delegator, the accept was taken, and the model got the
#                      answer back as the AskUserQuestion tool's result
#   task-ask-allow-reaped, task-ask-reject-reaped, task-question-reaped: as task-reaped
#   T8. (issue 38) task 1's outcome carries the agent's usage and cost (check_task_usage), and
#       task 7 (Claude Code; every agent with E2E_FOLLOWUP_ALL=1) takes a follow-up: a hub with
#       session_keep_secs = 120, `delegate --keep 120 --wait`, `task prompt`, `await
#       --reply-to TASK --kind task_outcome`, `task close` (run_task_followup).
#   task-usage         Claude: usage source acp, cost USD > 0 source acp; Gemini: usage
#                      source acp-meta, no cost; token counts whole multiples of the mock's
#                      10 in / 5 out, at most one per model request (Codex, OpenCode: a note)
#   task-followup-kept turn 1's outcome: turn 1, completed, session kept, keptUntil
#   task-followup      `task prompt` said turn 2; turn 2's outcome completed, end_turn,
#                      session kept; its model request carried turn 1's prompt and answer;
#                      one agent process; reported totals grew
#   task-followup-closed, task-followup-reaped: task close answered completed, the record's
#                      session closed with two turns; the agent reaped
#
# Exit status: 0 all checks passed (agents that could not be installed are SKIPped), 1 a
# check failed or usage error, 77 every requested agent was skipped (no node/npm, npm registry
# unreachable, package not installable, no python3 or no mock). Nothing here fails for lack of
# network: that is a SKIP.
#
# Environment: E2E_CACHE, E2E_MOCK_LLM, E2E_AGENT_TIMEOUT,
# E2E_{CLAUDE,CODEX,GEMINI,OPENCODE}_VERSION (npm versions; "latest" works too),
# E2E_{CLAUDE,CODEX,GEMINI,OPENCODE}_BIN (use this binary
# instead of installing), E2E_{CLAUDE,CODEX}_ACP_VERSION, E2E_{CLAUDE,CODEX}_ACP_PKG and
# E2E_{CLAUDE,CODEX}_ACP_BIN (the same for the ACP adapters the task phase runs), E2E_SET,
# E2E_TASK_SANDBOX (the task phase hub's tasks.sandbox; default: absent, so auto),
# E2E_FOLLOWUP_ALL (non-empty: the follow-up task for every agent, not only Claude Code). Only
# 127.0.0.1 is used; the npm registry is contacted only to install a missing agent and, for
# --set current, to look up the latest versions. Every process started here is stopped by its
# PID (agents by their
# own process group) on exit. Work files are under a mktemp dir, removed on success and kept
# (path printed) on failure or with --keep.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_CACHE=${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-hub-e2e}
MOCK_LLM=${E2E_MOCK_LLM:-$ROOT/../shared/tools/mock_llm.py}
AGENT_TIMEOUT=${E2E_AGENT_TIMEOUT:-180}
SET=${E2E_SET:-pinned}
# The task phase's hub runs its agents in the default sandbox (tasks.sandbox absent: auto,
# docs/delegation.md "Task identity"); E2E_TASK_SANDBOX=bwrap|landlock|none picks one.
TASK_SANDBOX=${E2E_TASK_SANDBOX:-}

usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; }

AGENTS=()
BUILD=1
KEEP=0
TRACE=0
PHASE=all
while (($#)); do
    case $1 in
        --agent)
            [[ $# -ge 2 ]] || { usage >&2; exit 1; }
            case $2 in
                claude | codex | gemini | opencode) AGENTS+=("$2") ;;
                all) AGENTS+=(claude codex gemini opencode) ;;
                *) echo "e2e: unknown agent '$2' (claude, codex, gemini, opencode or all)" >&2; exit 1 ;;
            esac
            shift 2 ;;
        --agent=*) set -- --agent "${1#--agent=}" "${@:2}" ;;
        --phase)
            [[ $# -ge 2 ]] || { usage >&2; exit 1; }
            case $2 in
                hook | task | headless | all) PHASE=$2 ;;
                *) echo "e2e: unknown phase '$2' (hook, task, headless or all)" >&2; exit 1 ;;
            esac
            shift 2 ;;
        --phase=*) set -- --phase "${1#--phase=}" "${@:2}" ;;
        --set)
            [[ $# -ge 2 ]] || { usage >&2; exit 1; }
            SET=$2
            shift 2 ;;
        --set=*) set -- --set "${1#--set=}" "${@:2}" ;;
        --no-build) BUILD=0; shift ;;
        --keep) KEEP=1; shift ;;
        --trace-net) TRACE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "e2e: unknown argument '$1'" >&2; usage >&2; exit 1 ;;
    esac
done
((${#AGENTS[@]})) || AGENTS=(claude)
case $SET in
    pinned | current) ;;
    *) echo "e2e: unknown release set '$SET' (pinned or current)" >&2; exit 1 ;;
esac

# The npm packages (the CLIs the hook phase runs) and the ACP adapters delegated tasks run
# Claude Code and Codex through (their manifests' run.acp; Gemini CLI and OpenCode speak ACP
# themselves: `gemini --acp`, `opencode acp`). The pinned set's versions; `current` looks its
# own up below. An empty version means "could not be looked up" (a SKIP at install).
if [[ $SET == pinned ]]; then
    CLAUDE_ACP_PKG=${E2E_CLAUDE_ACP_PKG:-@zed-industries/claude-agent-acp}
    CODEX_ACP_PKG=${E2E_CODEX_ACP_PKG:-@zed-industries/codex-acp}
    CLAUDE_VERSION=${E2E_CLAUDE_VERSION:-2.1.197}
    CODEX_VERSION=${E2E_CODEX_VERSION:-0.171.0}
    GEMINI_VERSION=${E2E_GEMINI_VERSION:-0.61.0}
    OPENCODE_VERSION=${E2E_OPENCODE_VERSION:-1.18.33}
    CLAUDE_ACP_VERSION=${E2E_CLAUDE_ACP_VERSION:-0.23.1}
    CODEX_ACP_VERSION=${E2E_CODEX_ACP_VERSION:-0.16.0}
else
    CLAUDE_ACP_PKG=${E2E_CLAUDE_ACP_PKG:-@agentclientprotocol/claude-agent-acp}
    CODEX_ACP_PKG=${E2E_CODEX_ACP_PKG:-@agentclientprotocol/codex-acp}
    # `npm view` once per package, for the agents asked for only.
    latest() {
        command -v npm >/dev/null || return 0
        timeout 60 npm view --fetch-timeout=30000 --fetch-retries=1 "$1" version 2>/dev/null | tail -n1 || true
    }
    # latest_for AGENT PKG: PKG's latest version when AGENT was asked for, else nothing.
    latest_for() {
        [[ " ${AGENTS[*]} " == *" $1 "* ]] || return 0
        latest "$2"
    }
    CLAUDE_VERSION=${E2E_CLAUDE_VERSION:-$(latest_for claude @anthropic-ai/claude-code)}
    CODEX_VERSION=${E2E_CODEX_VERSION:-$(latest_for codex @openai/codex)}
    GEMINI_VERSION=${E2E_GEMINI_VERSION:-$(latest_for gemini @google/gemini-cli)}
    OPENCODE_VERSION=${E2E_OPENCODE_VERSION:-$(latest_for opencode opencode-ai)}
    CLAUDE_ACP_VERSION=${E2E_CLAUDE_ACP_VERSION:-$(latest_for claude "$CLAUDE_ACP_PKG")}
    CODEX_ACP_VERSION=${E2E_CODEX_ACP_VERSION:-$(latest_for codex "$CODEX_ACP_PKG")}
fi
echo "e2e: release set $SET: claude-code ${CLAUDE_VERSION:-?}, codex ${CODEX_VERSION:-?}, gemini-cli ${GEMINI_VERSION:-?}, opencode ${OPENCODE_VERSION:-?}; adapters $CLAUDE_ACP_PKG ${CLAUDE_ACP_VERSION:-?}, $CODEX_ACP_PKG ${CODEX_ACP_VERSION:-?}"

NPASS=0 NFAIL=0 NSKIP=0 NRAN=0
pass() { NPASS=$((NPASS + 1)); echo "PASS [$1] $2${3:+: $3}"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL [$1] $2${3:+: $3}"; }
skip() { NSKIP=$((NSKIP + 1)); echo "SKIP [$1] $2"; }
note() { echo "     [$1] $2"; }

# ---- processes: every one we start is recorded here and stopped by PID on exit ----------
PIDS=()   # single processes (hub, mock, helper clients)
PGIDS=()  # agents, each the leader of its own process group (setsid)
WORK=""
# A PID leaves these lists as soon as its process has been waited for, so a PID the kernel
# may have reused is never signalled.
stop_pid() { kill -TERM "$1" 2>/dev/null || true; }
forget() {
    local x=$1 p keep=()
    for p in ${PIDS[@]+"${PIDS[@]}"}; do [[ $p == "$x" ]] || keep+=("$p"); done
    PIDS=(${keep[@]+"${keep[@]}"})
    keep=()
    for p in ${PGIDS[@]+"${PGIDS[@]}"}; do [[ $p == "$x" ]] || keep+=("$p"); done
    PGIDS=(${keep[@]+"${keep[@]}"})
}
# Stops one process we started (TERM, then KILL after 2 s), reaps it and forgets it.
reap() {
    local p=$1 i
    stop_pid "$p"
    for ((i = 0; i < 20; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    forget "$p"
}
# Stops what is left of an agent's process group (its leader already exited and was waited
# for: MCP servers or relaunched children may linger), then forgets it.
reap_group() {
    local g=$1 i
    kill -TERM -- "-$g" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$g" 2>/dev/null || true
    forget "$g"
}
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in ${PGIDS[@]+"${PGIDS[@]}"}; do kill -TERM -- "-$p" 2>/dev/null || true; done
    for p in ${PGIDS[@]+"${PGIDS[@]}"}; do reap_group "$p"; done
    for p in ${PIDS[@]+"${PIDS[@]}"}; do reap "$p"; done
    if [[ -n $WORK && -d $WORK ]]; then
        if ((KEEP || NFAIL || rc != 0 && rc != 77)); then
            echo "e2e: work files kept in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- prerequisites ---------------------------------------------------------------------
all_skipped() {
    echo "SKIP: $1"
    echo "e2e: 0 passed, 0 failed, ${#AGENTS[@]} skipped"
    exit 77
}
command -v python3 >/dev/null || all_skipped "python3 not found (the mock LLM needs it)"
[[ -f $MOCK_LLM ]] || all_skipped "mock LLM not found at $MOCK_LLM (set E2E_MOCK_LLM)"
command -v setsid >/dev/null || all_skipped "setsid not found (util-linux)"
if ((TRACE)) && ! command -v strace >/dev/null; then
    echo "e2e: --trace-net needs strace" >&2
    exit 1
fi

# ---- progress: what runs now, how far along, how long each step took -------------------
# fd 3 is the script's stdout, so progress shows even from functions whose stdout or stderr
# is captured (npm_bin's output is a path; its stderr goes to a file).
exec 3>&1
T_START=$SECONDS
NSTEPS=$BUILD
for a in "${AGENTS[@]}"; do
    [[ $PHASE == hook || $PHASE == all ]] && NSTEPS=$((NSTEPS + 1))
    [[ $PHASE == task || $PHASE == all ]] && NSTEPS=$((NSTEPS + 1))
    [[ $PHASE == headless || $PHASE == all ]] && NSTEPS=$((NSTEPS + 1))
done
STEP=0
STEP_T0=$SECONDS
step() {
    STEP=$((STEP + 1))
    STEP_T0=$SECONDS
    echo "e2e: [$STEP/$NSTEPS] $* (at ${SECONDS}s)" >&3
}
step_done() { echo "e2e: [$STEP/$NSTEPS] done in $((SECONDS - STEP_T0))s" >&3; }

if ((BUILD)); then
    step "building agent-hub and agent-hub-server (cargo build --release; the first build from clean takes many minutes, later ones seconds)…"
    (cd "$ROOT" && cargo build --release --quiet --bin agent-hub --bin agent-hub-server)
    step_done
fi
AH=$ROOT/target/release/agent-hub
SERVER=$ROOT/target/release/agent-hub-server
[[ -x $AH && -x $SERVER ]] || { echo "e2e: $AH or $SERVER missing (build first)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agent-hub-e2e.XXXXXX")
chmod 700 "$WORK"

nonce() { od -An -N8 -tx1 /dev/urandom | tr -d ' \n'; }

# Waits up to $3 seconds for a line matching the sed expression $2 in file $1; prints \1.
wait_for_line() {
    local file=$1 expr=$2 secs=$3 out i
    for ((i = 0; i < secs * 10; i++)); do
        out=$(sed -n "$expr" "$file" 2>/dev/null | head -n1)
        [[ -n $out ]] && { echo "$out"; return 0; }
        sleep 0.1
    done
    return 1
}

# ---- agent CLIs: install (cached) -------------------------------------------------------
agent_pkg() {
    case $1 in
        claude) echo "@anthropic-ai/claude-code@$CLAUDE_VERSION" ;;
        codex) echo "@openai/codex@$CODEX_VERSION" ;;
        gemini) echo "@google/gemini-cli@$GEMINI_VERSION" ;;
        opencode) echo "opencode-ai@$OPENCODE_VERSION" ;;
    esac
}

# The npm package and binary a delegated task runs the agent with (its manifest's run.acp).
acp_pkg() {
    case $1 in
        claude) echo "$CLAUDE_ACP_PKG@$CLAUDE_ACP_VERSION" ;;
        codex) echo "$CODEX_ACP_PKG@$CODEX_ACP_VERSION" ;;
        *) agent_pkg "$1" ;;
    esac
}
acp_cmd() {
    case $1 in
        claude) echo claude-agent-acp ;;
        codex) echo codex-acp ;;
        *) echo "$1" ;;
    esac
}

# Prints the agent binary's path, installing the npm package into the cache if needed.
# Returns 1 (with the reason on stderr) when it cannot.
agent_bin() { npm_bin "$(agent_pkg "$1")" "$1" "E2E_${1^^}_BIN"; }
# The same for the ACP entry point a delegated task runs (E2E_CLAUDE_ACP_BIN, …).
acp_bin() {
    local cmd
    cmd=$(acp_cmd "$1")
    if [[ $cmd == "$1" ]]; then agent_bin "$1"; else npm_bin "$(acp_pkg "$1")" "$cmd" "E2E_${1^^}_ACP_BIN"; fi
}
# "NAME VERSION" of the npm package that holds executable $1 (the nearest package.json with a
# name above the file it resolves to), or "?": what actually runs, cached or named by an
# E2E_*_BIN override alike.
bin_package() {
    python3 - "$1" <<'PY' 2>/dev/null || echo "?"
import json, os, sys
d = os.path.dirname(os.path.realpath(sys.argv[1]))
while d != os.path.dirname(d):
    try:
        with open(os.path.join(d, "package.json")) as f:
            j = json.load(f)
        if j.get("name"):
            print("%s %s" % (j["name"], j.get("version", "?")))
            break
    except (OSError, ValueError):
        pass
    d = os.path.dirname(d)
else:
    print("?")
PY
}

# npm_bin PKG@VERSION BIN OVERRIDE_VAR: the binary BIN of that package, installed into the
# cache if missing, or the executable $OVERRIDE_VAR names.
npm_bin() {
    local pkg=$1 agent=$2 var=$3 dir override
    override=${!var:-}
    if [[ -n $override ]]; then
        [[ -x $override ]] || { echo "$var=$override is not executable" >&2; return 1; }
        echo "$override"
        return 0
    fi
    if [[ $pkg == *@ ]]; then
        echo "no version of ${pkg%@} to install (--set current could not look it up: offline?)" >&2
        return 1
    fi
    dir=$E2E_CACHE/${pkg//\//+}
    if [[ ! -x $dir/node_modules/.bin/$agent ]]; then
        command -v node >/dev/null || { echo "node not found" >&2; return 1; }
        command -v npm >/dev/null || { echo "npm not found" >&2; return 1; }
        mkdir -p "$dir"
        local t_npm=$SECONDS
        echo "e2e: [$STEP/$NSTEPS] installing $agent from npm ($pkg) into $dir — once, then cached; can take minutes…" >&3
        # A failed or partial install is removed whole, so the next run starts clean.
        if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
            --fetch-timeout=30000 --fetch-retries=1 "$pkg" >"$dir.npm.log" 2>&1 ||
            [[ ! -x $dir/node_modules/.bin/$agent ]]; then
            rm -rf "$dir"
            echo "npm install $pkg failed (offline?); see $dir.npm.log" >&2
            return 1
        fi
        echo "e2e: [$STEP/$NSTEPS] installed $pkg in $((SECONDS - t_npm))s" >&3
    fi
    echo "$dir/node_modules/.bin/$agent"
}

# Writes into HOME $2 only what points agent $1 at the mock LLM on port $3 (Codex provider,
# Gemini auth type, OpenCode provider; telemetry, update checks and plugin sync off). $4 is
# OpenCode's permission for every tool: "allow" (default; a headless run has nobody to ask)
# or "ask" (the task phase: OpenCode then asks the hub, whose policy decides).
point_at_mock() {
    local agent=$1 home=$2 mock_port=$3 opencode_permission=${4:-allow}
    case $agent in
        codex)
            mkdir -p "$home/.codex"
            cat >"$home/.codex/config.toml" <<EOF
model = "mock-1"
model_provider = "mock"
check_for_update_on_startup = false

[model_providers.mock]
name = "mock"
base_url = "http://127.0.0.1:$mock_port/v1"
env_key = "MOCK_API_KEY"
wire_api = "responses"

[analytics]
enabled = false

[features]
plugins = false
EOF
            ;;
        gemini)
            mkdir -p "$home/.gemini"
            cat >"$home/.gemini/settings.json" <<EOF
{
  "security": { "auth": { "selectedType": "gemini-api-key" } },
  "privacy": { "usageStatisticsEnabled": false }
}
EOF
            ;;
        opencode)
            # The mock as an OpenAI-compatible provider (built into OpenCode, nothing is
            # fetched); every tool allowed (a headless run cannot answer a permission ask), or
            # every tool asked for (through ACP, the hub's policy answers).
            mkdir -p "$home/.config/opencode"
            cat >"$home/.config/opencode/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "model": "mock/mock-1",
  "autoupdate": false,
  "share": "disabled",
  "permission": { "*": "$opencode_permission" },
  "provider": {
    "mock": {
      "npm": "@ai-sdk/openai-compatible",
      "options": { "baseURL": "http://127.0.0.1:$mock_port/v1", "apiKey": "dummy" },
      "models": { "mock-1": { "tool_call": true } }
    }
  }
}
EOF
            # OpenCode npm-installs its plugin SDK (@opencode-ai/plugin) into every config
            # folder at start, from the registry, unless node_modules exists and the lock file
            # already lists it. agent-hub's plugin imports only node: modules, so a lock file
            # saying so keeps the run offline.
            mkdir -p "$home/.config/opencode/node_modules"
            printf '{"packages":{"":{"dependencies":{"@opencode-ai/plugin":"%s"}}}}\n' \
                "$OPENCODE_VERSION" >"$home/.config/opencode/package-lock.json"
            ;;
    esac
}

# ---- one agent ---------------------------------------------------------------------------
run_agent() {
    local agent=$1 bin version d home proj hub_port mock_port tok_w tok_o hub_pid mock_pid
    local send_args reply_body ping_nonce reply_nonce prompt pid
    if ! bin=$(agent_bin "$agent" 2>"$WORK/$agent-install.err"); then
        skip "$agent" "$(tail -n1 "$WORK/$agent-install.err")"
        return 0
    fi
    if ! version=$(HOME=$WORK timeout 60 "$bin" --version </dev/null 2>/dev/null | head -n1) || [[ -z $version ]]; then
        skip "$agent" "$bin --version failed (node too old?)"
        return 0
    fi
    NRAN=$((NRAN + 1))
    echo "e2e: [$agent] $version ($bin)"
    d=$WORK/$agent
    home=$d/home
    proj=$d/proj
    mkdir -p "$home" "$proj"

    # Hub.
    "$SERVER" demo "$d/hub" --port 0 >"$d/hub.out" 2>"$d/hub.err" &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail "$agent" hub "agent-hub-server demo did not start: $(cat "$d/hub.err")"
        return 0
    fi
    tok_w=$d/hub/tokens/worker.token
    tok_o=$d/hub/tokens/orchestrator.token

    # Mock LLM.
    ping_nonce=$(nonce)
    reply_nonce=$(nonce)
    send_args="{\"to\":\"orchestrator\",\"kind\":\"e2e-ping\",\"body\":{\"e2e\":\"ping\",\"agent\":\"$agent\",\"nonce\":\"$ping_nonce\"}}"
    MOCK_LOG=$d/mock.log MOCK_REQUEST_LOG=$d/requests.log MOCK_TOOL_ARGS=$send_args \
        MOCK_GATE_FILE=$d/gate MOCK_GATE_SECS=$AGENT_TIMEOUT \
        python3 "$ROOT/scripts/e2e-mock-llm.py" "$MOCK_LLM" 0 >"$d/mock.out" 2>"$d/mock.err" &
    mock_pid=$!
    PIDS+=("$mock_pid")
    if ! mock_port=$(wait_for_line "$d/mock.out" 's/.*on 127\.0\.0\.1:\([0-9]*\)$/\1/p' 15); then
        fail "$agent" mock "mock LLM did not start: $(cat "$d/mock.err")"
        return 0
    fi
    note "$agent" "hub on 127.0.0.1:$hub_port, mock LLM on 127.0.0.1:$mock_port, HOME=$home"

    # What points the agent at the mock (written before install; install keeps it).
    point_at_mock "$agent" "$home" "$mock_port"

    # agent-hub install, with the agent's binary on PATH as a user would have it.
    if HOME=$home PATH="$(dirname "$bin"):$PATH" "$AH" install --agent "$agent" \
        --as worker --token-file "$tok_w" --port "$hub_port" >"$d/install.out" 2>&1 &&
        grep -q 'MCP server "agent-hub" .* added$' "$d/install.out" &&
        grep -Eq '((Stop|AfterAgent) hook .*|: plugin) added$' "$d/install.out"; then
        pass "$agent" install "MCP server and $(grep -Eo '(Stop|AfterAgent) hook|plugin added' "$d/install.out" | head -n1 | sed 's/ added$//') added"
    else
        fail "$agent" install "$(cat "$d/install.out")"
        return 0
    fi

    # The agent, headless, in its own process group, in a clean environment.
    prompt="agent-hub e2e: CALL_TOOL:send"
    local envv=(HOME="$home" PATH="$(dirname "$bin"):/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb)
    local argv=()
    case $agent in
        claude)
            envv+=(ANTHROPIC_BASE_URL="http://127.0.0.1:$mock_port" ANTHROPIC_API_KEY=dummy
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
                DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1)
            # Claude Code refuses some permission modes as root unless IS_SANDBOX=1 (facts §2.1).
            [[ $(id -u) == 0 ]] && envv+=(IS_SANDBOX=1)
            argv=("$bin" -p "$prompt" --output-format json --allowedTools mcp__agent-hub__send) ;;
        codex)
            envv+=(MOCK_API_KEY=dummy)
            # Hooks run only when trusted (the TUI's /hooks); this run bypasses trust once, and
            # approves the hub's MCP tools for exec, as the installer's trust notes tell a user.
            argv=("$bin" exec --json --skip-git-repo-check --dangerously-bypass-hook-trust
                -c 'mcp_servers.agent-hub.default_tools_approval_mode="approve"' "$prompt") ;;
        gemini)
            envv+=(GEMINI_API_KEY=dummy GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$mock_port"
                GEMINI_CLI_TRUST_WORKSPACE=true)
            argv=("$bin" -p "$prompt" --output-format json --allowed-tools mcp_agent-hub_send) ;;
        opencode)
            # `opencode run` exits at the first idle, before the turn the plugin injects there
            # runs; scripts/e2e-opencode.py runs `opencode serve` and prompts it over HTTP.
            envv+=(OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
                OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1)
            argv=(python3 "$ROOT/scripts/e2e-opencode.py" "$bin" "$prompt") ;;
    esac
    local tracer=()
    ((TRACE)) && tracer=(strace -f -qq -e trace=connect -e signal=none -o "$d/connect.strace")
    local t0=$SECONDS
    (cd "$proj" && exec setsid timeout -k 5 "$AGENT_TIMEOUT" ${tracer[@]+"${tracer[@]}"} env -i "${envv[@]}" "${argv[@]}" \
        </dev/null >"$d/agent.out" 2>"$d/agent.err") &
    pid=$!   # a background job of a non-interactive shell is no group leader, so setsid
    PGIDS+=("$pid") # did not fork: $pid leads the agent's new session and process group

    # As orchestrator: await the agent's envelope (give up soon after the agent exits).
    "$AH" await --as orchestrator --token-file "$tok_o" --port "$hub_port" \
        --timeout "$AGENT_TIMEOUT" >"$d/ping.json" 2>"$d/ping.err" &
    local await_pid=$! gone=0
    PIDS+=("$await_pid")
    while kill -0 "$await_pid" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            gone=$((gone + 1))
            ((gone > 30)) && { stop_pid "$await_pid"; break; }
        fi
        sleep 0.1
    done
    wait "$await_pid" 2>/dev/null || true
    forget "$await_pid"
    local ping_id=""
    ping_id=$(python3 - "$d/ping.json" "$send_args" <<'PY' 2>"$d/ping.check" || true
import json, sys
env = json.loads(open(sys.argv[1]).readline())
want = json.loads(sys.argv[2])
bad = []
if env.get("from") != "worker": bad.append("from %r" % env.get("from"))
if env.get("to") != "orchestrator": bad.append("to %r" % env.get("to"))
if env.get("kind") != want["kind"]: bad.append("kind %r" % env.get("kind"))
if env.get("body") != want["body"]: bad.append("body %s" % json.dumps(env.get("body")))
if bad: sys.exit("envelope differs: " + ", ".join(bad))
print(env["id"])
PY
    )
    if [[ -n $ping_id ]]; then
        pass "$agent" hub-envelope "orchestrator got $ping_id from worker with the model's body"
    else
        fail "$agent" hub-envelope "$(cat "$d/ping.check" "$d/ping.err" 2>/dev/null | tail -n2 | tr '\n' ' ')"
    fi

    # liveness-busy: mid-turn (the mock holds the tool result), `who` shows worker busy from
    # the installed turn-start hook (Claude UserPromptSubmit, Gemini BeforeAgent; SPEC §14.1).
    local live
    live=$(worker_state "$tok_o" "$hub_port")
    case $agent in
        claude | gemini | opencode)
            if [[ $live == busy* ]]; then
                pass "$agent" liveness-busy "who: worker $live"
            else
                fail "$agent" liveness-busy "who: worker ${live:-?}, wanted busy"
            fi ;;
        *) note "$agent" "liveness mid-turn: worker ${live:-?} (no turn-start hook for $agent)" ;;
    esac

    # As orchestrator: reply while the agent's turn is still open, then release the mock.
    local reply_id=""
    reply_body="{\"e2e\":\"reply\",\"nonce\":\"$reply_nonce\"}"
    if reply_id=$("$AH" send --as orchestrator --token-file "$tok_o" --port "$hub_port" \
        --to worker --kind e2e-reply ${ping_id:+--correlation-id "$ping_id"} \
        --body "$reply_body" 2>"$d/reply.err"); then
        note "$agent" "orchestrator replied $reply_id"
    else
        fail "$agent" reply-send "$(cat "$d/reply.err")"
    fi
    : >"$d/gate"

    local rc=0
    wait "$pid" || rc=$?
    local took=$((SECONDS - t0))
    reap_group "$pid"
    if ((rc == 0)); then
        pass "$agent" agent-exit "exit 0 after ${took}s"
    elif ((rc == 124 || rc == 137)); then
        fail "$agent" agent-exit "timed out after ${AGENT_TIMEOUT}s"
    else
        fail "$agent" agent-exit "exit $rc after ${took}s: $(tail -n3 "$d/agent.err" | tr '\n' ' ')"
    fi

    # liveness-gone: the agent exited; `who` shows worker gone (its SessionEnd hook, or the
    # hub's check of the process the Stop hook named) within 10 s.
    local waited=0
    live=$(worker_state "$tok_o" "$hub_port")
    while [[ $live != gone* ]] && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
        live=$(worker_state "$tok_o" "$hub_port")
    done
    case $agent in
        claude | gemini | codex | opencode)
            if [[ $live == gone* ]]; then
                pass "$agent" liveness-gone "who: worker $live"
            else
                fail "$agent" liveness-gone "who: worker ${live:-?} 10 s after the agent exited"
            fi ;;
        *) note "$agent" "liveness after exit: worker ${live:-?}" ;;
    esac

    # Everything else is read from the logs.
    AGENT=$agent PING_ID=$ping_id REPLY_ID=$reply_id REPLY_NONCE=$reply_nonce D=$d \
        python3 - >"$d/checks.out" <<'PY' || true
import json, os, re

agent, d = os.environ["AGENT"], os.environ["D"]
ping_id, reply_id, nonce = os.environ["PING_ID"], os.environ["REPLY_ID"], os.environ["REPLY_NONCE"]
TOOL = {"claude": "mcp__agent-hub__send", "codex": "mcp__agent_hub::send", "gemini": "mcp_agent-hub_send",
        "opencode": "agent-hub_send"}[agent]

def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []

def out(name, ok, detail):
    print("%s\t%s\t%s" % ("PASS" if ok else "FAIL", name, detail))

mock = lines(os.path.join(d, "mock.log"))
reqs = lines(os.path.join(d, "requests.log"))   # {"n", "reply", "body"} per model request
# The agent's own turns are the requests that offer the model tools. Claude Code 2.1.3xx also
# makes side requests without tools (prompt suggestions, a permission classifier) that repeat
# the conversation; they are not turns, and their replies are not the agent's answer.
def offers_tools(r):
    return bool((r.get("body") or {}).get("tools"))
turns = [r for r in reqs if offers_tools(r)]

# mcp-tool: the model was offered the hub's send tool and the mock called it.
calls = [m for m in mock if m.get("reply", [None])[0] == "tool"]
if calls and calls[0]["reply"][1] == TOOL:
    out("mcp-tool", True, "model called %s (mock request %d)" % (TOOL, calls[0]["n"]))
else:
    out("mcp-tool", False, "expected a call to %s; mock replies: %s" % (TOOL, [m.get("reply") for m in mock]))

# tool-result: a later request carries the hub's answer (the envelope id) as the tool result.
def has_result(r):
    s = json.dumps(r["body"])
    return ping_id and ping_id in s and any(k in s for k in ('"tool_result"', '"function_call_output"', '"functionResponse"', '"role": "tool"'))
tr = [r for r in reqs if has_result(r)]
out("tool-result", bool(tr), ("request %d returned the envelope id to the model" % tr[0]["n"]) if tr
    else "no model request carried the tool result with id %r" % ping_id)

# hook-feedback: a request holds the rendered reply (body, id, sender), framed the way this
# agent hands a blocking hook's reason to the model. The mock's own MOCK_LOG must show it
# too, except for Codex: the mock's log skips user text that starts with "<".
FRAME = {
    "claude": r'Stop hook feedback:\nagent-hub: 1 new message for "worker"',
    "codex": r'<hook_prompt hook_run_id="stop:[^"]*">agent-hub: 1 new message for "worker"',
    "gemini": r'^agent-hub: 1 new message for "worker"',
    "opencode": r'^agent-hub: 1 new message for "worker"',
}[agent]
def strings(o):
    if isinstance(o, str):
        yield o
    elif isinstance(o, dict):
        for v in o.values(): yield from strings(v)
    elif isinstance(o, list):
        for v in o: yield from strings(v)
def feedback(text):
    return bool(reply_id) and nonce in text and reply_id in text and 'from "orchestrator"' in text
fb = [r for r in turns if any(feedback(t) and re.search(FRAME, t) for t in strings(r["body"]))]
in_mock = [m for m in mock if feedback(m.get("last_user_text", ""))]
if fb and (in_mock or agent == "codex"):
    out("hook-feedback", True, "model request %d held the reply %s from orchestrator as hook feedback (%s)" % (
        fb[0]["n"], reply_id, "mock log and request log" if in_mock else "request log; the mock's log skips <hook_prompt>"))
else:
    out("hook-feedback", False, "reply %s (nonce %s): %d framed request(s) in the request log, %d in the mock log" % (
        reply_id, nonce, len(fb), len(in_mock)))

# second-turn: the agent's final answer is the mock's answer to the feedback request.
final = ""
try:
    raw = open(os.path.join(d, "agent.out")).read()
    if agent == "claude":
        o = json.loads(raw); final = o.get("result", "") if not o.get("is_error") else ""
    elif agent == "codex":
        for l in raw.splitlines():
            try: e = json.loads(l)
            except ValueError: continue
            it = e.get("item") or {}
            if e.get("type") == "item.completed" and it.get("type") == "agent_message":
                final = it.get("text", "")
    elif agent == "opencode":
        final = json.loads(raw).get("final", "")
    else:
        final = json.loads(raw).get("response", "")
except (OSError, ValueError) as e:
    final = ""
want = "MOCK_REPLY %d" % fb[0]["n"] if fb else None
ok = bool(want) and final.endswith(want)
out("second-turn", ok, ("final answer %r is the reply to the feedback turn" % want) if ok
    else "final answer %r, wanted %r" % (final[-80:], want))

# plugin-inject (OpenCode): the mail entered the same session as its second user message,
# which only the plugin's promptAsync puts there; e2e-opencode.py returns the session's messages.
if agent == "opencode":
    try:
        msgs = json.loads(open(os.path.join(d, "agent.out")).read()).get("messages", [])
    except (OSError, ValueError):
        msgs = []
    users = ["".join(p.get("text", "") for p in m.get("parts", []) if p.get("type") == "text")
             for m in msgs if m.get("info", {}).get("role") == "user"]
    ok = len(users) == 2 and users[1].startswith('agent-hub: 1 new message for "worker"') and feedback(users[1])
    out("plugin-inject", ok, ("the session's second user message is the drained reply %s" % reply_id) if ok
        else "session user messages: %s" % [u[:60] for u in users])

# hook-bounded: after the feedback turn the hook let the agent stop: the feedback request was
# the last model request (the agent's exit is checked apart). hook.log only adds detail.
last_n = max((r["n"] for r in turns), default=None)
hook_log = os.path.join(d, "home/.local/state/agent-hub/hook.log")
runs = open(hook_log).read().strip().splitlines() if os.path.exists(hook_log) else []
runs = [l for l in runs if " hook stop as " not in l]
ok = bool(fb) and fb[-1]["n"] == last_n
out("hook-bounded", ok, "%s; %s" % (
    "no model request after the feedback turn" if ok else
    "last model request %s, feedback request %s" % (last_n, fb[-1]["n"] if fb else None),
    # OpenCode's plugin writes no hook.log; the session stayed idle for the driver's quiet time.
    "the session then stayed idle" if agent == "opencode" else "hook.log: " +
    (" / ".join(re.sub(r"^\S+ \[\d+\] ", "", l) for l in runs[-3:]) or "empty")))
PY
    local status name detail
    while IFS=$'\t' read -r status name detail; do
        if [[ $status == PASS ]]; then pass "$agent" "$name" "$detail"; else fail "$agent" "$name" "$detail"; fi
    done <"$d/checks.out"
    [[ -s $d/checks.out ]] || fail "$agent" checks "the log checker failed"

    # reply-acked: the hub saw the hook's ack.
    local st=""
    if [[ -n $reply_id ]] && st=$("$AH" status --as orchestrator --token-file "$tok_o" --port "$hub_port" \
        --id "$reply_id" 2>&1) && [[ $st == *'"state":"acked"'* ]]; then
        pass "$agent" reply-acked "hub: $reply_id acked by worker"
    else
        fail "$agent" reply-acked "hub status: ${st:-no reply id}"
    fi

    if ((TRACE)); then
        local outside
        outside=$(grep -E 'connect\(.*(sin_addr|sin6_addr)' "$d/connect.strace" |
            grep -v -E 'inet_addr\("127\.|inet_pton\(AF_INET6, "::1"|"::ffff:127\.' || true)
        if [[ -z $outside ]]; then
            pass "$agent" loopback-only "$(grep -c -E 'connect\(.*sin_addr' "$d/connect.strace") connects, all to 127.0.0.1"
        else
            fail "$agent" loopback-only "$(echo "$outside" | head -n3 | tr '\n' ' ')"
        fi
    fi
    reap "$hub_pid"
    reap "$mock_pid"
    note "$agent" "agent run took ${took}s"
}

# worker's `who` state and source ("busy (hook)"), asked as orchestrator: $1 token, $2 port.
worker_state() {
    "$AH" who --as orchestrator --token-file "$1" --port "$2" --json 2>/dev/null | python3 -c '
import json, sys
for a in json.load(sys.stdin)["agents"]:
    if a["name"] == "worker":
        print("%s (%s)" % (a.get("state"), a.get("source")))' 2>/dev/null || true
}

# ---- one agent, delegated: the hub runs the task through ACP -----------------------------
# Waits for await process $1 while process $2 (the task's waiter, or 0) lives; once $2 has
# been gone 3 s, stops the await. Returns when the await has ended.
await_while() {
    local await_pid=$1 other=$2 gone=0
    while kill -0 "$await_pid" 2>/dev/null; do
        if ((other)) && ! kill -0 "$other" 2>/dev/null; then
            gone=$((gone + 1))
            ((gone > 30)) && { stop_pid "$await_pid"; break; }
        fi
        sleep 0.1
    done
    wait "$await_pid" 2>/dev/null || true
    forget "$await_pid"
}

# Processes carrying task $1's mark (AGENT_HUB_TASK=<task> in their environment, which the hub
# gives every agent it starts and its children inherit), one PID a line.
task_procs() {
    grep -lszFx "AGENT_HUB_TASK=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
}

# Checks (name $2) that task $3's agent is gone: the hub logged "agent exited" (its runner
# reaped the agent; $4 is the hub's service log) and no process carries the task's mark (the
# runner kills the agent's whole process group, docs/acp.md "Shutdown"; a mark also finds
# children an agent moved to their own group). Waits up to 20 s; a survivor is a FAIL and is
# killed by PID here (it carries this run's own task id, so it is ours).
check_reaped() {
    local agent=$1 name=$2 task=$3 log=$4 i left="" exited=""
    for ((i = 0; i < 200; i++)); do
        left=$(task_procs "$task")
        # The exit line may carry a suffix ("; N lines after the outcome ignored", when the
        # agent spoke after its outcome, as codex-acp can under load): the status is the
        # parenthesis right after "agent exited".
        exited=$(sed -n "s/.* task $task: agent exited (\([^)]*\)).*\$/\1/p" "$log" | head -n1)
        [[ -z $left && -n $exited ]] && break
        sleep 0.1
    done
    if [[ -z $left && -n $exited ]]; then
        pass "$agent" "$name" "the hub reaped the agent ($exited); no process of the task left"
    elif [[ -z $left ]]; then
        fail "$agent" "$name" "no process left, but the hub never logged the agent's exit; its lines for the task: $(grep -F "task $task:" "$log" | cut -c1-200 | tail -n 4 | tr '\n' ';')"
    else
        fail "$agent" "$name" "still running: $(for p in $left; do tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80; done | tr '\n' ';')"
        for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
    fi
}

# Writes the task phase hub's config to $1: config.example.toml on port 0 and a [tasks]
# table with cwd_roots $2, the line $3 (a permission, or empty for the default, ask), and an
# env_pass naming the mock's endpoint and key variables (nothing else of the hub's
# environment reaches the agent).
task_hub_config() {
    local out=$1 root=$2 permission_line=$3
    {
        sed 's/^port = 46110$/port = 0/' "$ROOT/config.example.toml"
        cat <<EOF

[tasks]
cwd_roots = ["$root"]
timeout_secs = $AGENT_TIMEOUT
$permission_line
env_pass = ["PATH", "HOME", "LANG", "TERM", "TMPDIR", "ANTHROPIC_*", "CLAUDE_*", "OPENAI_*",
    "CODEX_*", "GEMINI_*", "GOOGLE_*", "OPENCODE_*", "MOCK_API_KEY", "IS_SANDBOX",
    "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING"]
${TASK_SANDBOX:+sandbox = \"$TASK_SANDBOX\"}
EOF
    } >"$out"
    chmod 600 "$out"
}

# The task phase hub's whole environment (it runs under env -i), into TASK_ENV: HOME $2,
# PATH with the adapter $3's folder first, and what points agent $1 at the mock on port $4;
# the rest of the arguments (the current CLI for an adapter) are added as they are.
task_hub_env() {
    local agent=$1 home=$2 bin=$3 mock_port=$4
    shift 4
    TASK_ENV=(HOME="$home" PATH="$(dirname "$bin"):/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb)
    case $agent in
        claude)
            TASK_ENV+=(ANTHROPIC_BASE_URL="http://127.0.0.1:$mock_port" ANTHROPIC_API_KEY=dummy
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
                DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1)
            # The adapter's Claude Code refuses its permission mode as root without it (§2.1).
            [[ $(id -u) == 0 ]] && TASK_ENV+=(IS_SANDBOX=1)
            TASK_ENV+=("$@") ;;
        codex) TASK_ENV+=(MOCK_API_KEY=dummy "$@") ;;
        gemini)
            TASK_ENV+=(GEMINI_API_KEY=dummy GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$mock_port"
                GEMINI_CLI_TRUST_WORKSPACE=true) ;;
        opencode)
            TASK_ENV+=(OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1
                OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1) ;;
    esac
}

run_task() {
    local agent=$1 bin d home work proj hub_port mock_port tok hub_pid mock_pid
    local send_args nonce1 prompt orch cli cli_env=() override
    if ! bin=$(acp_bin "$agent" 2>"$WORK/$agent-acp-install.err"); then
        skip "$agent" "task: $(tail -n1 "$WORK/$agent-acp-install.err")"
        return 0
    fi
    # The current set runs each adapter with the current CLI, not the one it bundles: the
    # adapters look for it in CLAUDE_CODE_EXECUTABLE (claude-agent-acp's claude-cli.js) and
    # CODEX_PATH (codex-acp 2.x), which tasks.env_pass (CLAUDE_*, CODEX_*) hands on.
    if [[ $SET == current && ($agent == claude || $agent == codex) ]]; then
        if ! cli=$(agent_bin "$agent" 2>"$WORK/$agent-install.err"); then
            skip "$agent" "task: $(tail -n1 "$WORK/$agent-install.err")"
            return 0
        fi
        case $agent in
            claude) cli_env=(CLAUDE_CODE_EXECUTABLE="$cli") ;;
            codex) cli_env=(CODEX_PATH="$cli") ;;
        esac
    fi
    NRAN=$((NRAN + 1))
    override=E2E_${agent^^}_ACP_BIN
    [[ $(acp_cmd "$agent") != "$agent" && -n ${!override:-} ]] && override=" (from $override)" || override=""
    echo "e2e: [$agent] task through ACP: $(acp_cmd "$agent") ($(bin_package "$bin"), $bin$override)"
    ((${#cli_env[@]})) && echo "e2e: [$agent] the adapter runs ${cli_env[0]} ($(HOME=$WORK timeout 60 "$cli" --version </dev/null 2>/dev/null | head -n1))"
    d=$WORK/$agent-task
    home=$d/home
    mkdir -p "$home" "$d/work/proj" "$d/hub/tokens"
    work=$(cd "$d/work" && pwd -P)
    proj=$work/proj

    # Mock LLM: its tool call is the hub's send to the delegator, with a nonce per run.
    nonce1=$(nonce)
    send_args="{\"to\":\"orchestrator\",\"kind\":\"e2e-task-mail\",\"body\":{\"e2e\":\"task\",\"agent\":\"$agent\",\"nonce\":\"$nonce1\"}}"
    MOCK_LOG=$d/mock.log MOCK_REQUEST_LOG=$d/requests.log MOCK_TOOL_ARGS=$send_args \
        MOCK_GATE_FILE=$d/gate MOCK_GATE_SECS=$AGENT_TIMEOUT \
        python3 "$ROOT/scripts/e2e-mock-llm.py" "$MOCK_LLM" 0 >"$d/mock.out" 2>"$d/mock.err" &
    mock_pid=$!
    PIDS+=("$mock_pid")
    if ! mock_port=$(wait_for_line "$d/mock.out" 's/.*on 127\.0\.0\.1:\([0-9]*\)$/\1/p' 15); then
        fail "$agent" task-hub "mock LLM did not start: $(cat "$d/mock.err")"
        return 0
    fi
    point_at_mock "$agent" "$home" "$mock_port" ask

    # The hub: the example config on an ephemeral port, one identity (orchestrator, the
    # delegator), and a [tasks] table (task_hub_config). Its permission is the default, ask,
    # for Claude Code and Gemini CLI: they ask for the hub's send tool by a name the hub
    # recognises, and the hub allows its own tools under every policy (issue 37), so their
    # mail needs no answer. Codex and OpenCode name it by nothing the hub can tell from
    # another tool's (docs/acp.md "The hub's own tools"): under ask their send would wait
    # for the delegator, so their hub says permission = "allow".
    local token permission_line=""
    case $agent in codex | opencode) permission_line='permission = "allow"' ;; esac
    token=$(nonce)$(nonce)
    printf '[agents]\norchestrator = "%s"\n' "$token" >"$d/hub/roster.toml"
    printf '%s\n' "$token" >"$d/hub/tokens/orchestrator.token"
    chmod 600 "$d/hub/roster.toml" "$d/hub/tokens/orchestrator.token"
    tok=$d/hub/tokens/orchestrator.token
    task_hub_config "$d/hub/config.toml" "$work" "$permission_line"
    task_hub_env "$agent" "$home" "$bin" "$mock_port" ${cli_env[@]+"${cli_env[@]}"}
    local envv=("${TASK_ENV[@]}")
    (cd "$d/hub" && exec env -i "${envv[@]}" "$SERVER" --config "$d/hub/config.toml" \
        >"$d/hub.out" 2>"$d/hub.err") &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail "$agent" task-hub "agent-hub-server did not start: $(cat "$d/hub.err" "$d/hub/service.log" 2>/dev/null | tail -n3)"
        return 0
    fi
    note "$agent" "hub with [tasks] on 127.0.0.1:$hub_port, mock LLM on 127.0.0.1:$mock_port, HOME=$home"
    orch=(--as orchestrator --token-file "$tok" --port "$hub_port")
    prompt="agent-hub e2e task: CALL_TOOL:send"

    # Task 1, to the end: `delegate --wait --json` prints the delegated answer and then the
    # outcome envelope. Meanwhile the delegator awaits the agent's mail from task-<hex>.
    : >"$d/gate" # the mock answers tool results at once
    local t0=$SECONDS waiter rc=0
    "$AH" delegate "${orch[@]}" --agent "$agent" --cwd "$proj" --prompt "$prompt" \
        --timeout "$AGENT_TIMEOUT" --wait --json >"$d/task1.out" 2>"$d/task1.err" &
    waiter=$!
    PIDS+=("$waiter")
    "$AH" await "${orch[@]}" --kind e2e-task-mail --timeout "$AGENT_TIMEOUT" \
        >"$d/mail1.json" 2>"$d/mail1.err" &
    PIDS+=("$!")
    await_while "$!" "$waiter"
    wait "$waiter" || rc=$?
    forget "$waiter"
    local took1=$((SECONDS - t0))
    local task1
    task1=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$d/task1.out" 2>/dev/null || true)
    cp "$d/requests.log" "$d/requests1.log" 2>/dev/null || : >"$d/requests1.log"
    TASK=$task1 WANT=$send_args MAIL=$d/mail1.json REQS=$d/requests1.log python3 - <<'PY' >"$d/checks1.out" || true
import json, os
task, want = os.environ["TASK"], json.loads(os.environ["WANT"])
def out(name, ok, detail): print("%s\t%s\t%s" % ("PASS" if ok else "FAIL", name, detail))
try:
    env = json.loads(open(os.environ["MAIL"]).readline())
except (OSError, ValueError):
    env = None
if env is None:
    out("task-mail", False, "the delegator got no e2e-task-mail envelope")
else:
    bad = [k for k, v in (("from", task), ("to", "orchestrator"), ("kind", want["kind"]), ("body", want["body"]))
           if env.get(k) != v]
    out("task-mail", not bad and bool(task), ("orchestrator got %s from %s (the agent's send tool) with the model's body" % (env.get("id"), task))
        if not bad else "envelope differs in %s: %s" % (bad, json.dumps(env)[:300]))
    # The send tool's answer (the envelope id) went back to the model as the tool result.
    reqs = [json.loads(l) for l in open(os.environ["REQS"]) if l.strip()]
    marks = ('"tool_result"', '"function_call_output"', '"functionResponse"', '"role": "tool"')
    tr = [r for r in reqs if env.get("id") and env["id"] in json.dumps(r["body"]) and any(m in json.dumps(r["body"]) for m in marks)]
    out("task-tool-result", bool(tr), ("model request %d carried the envelope id as the tool result" % tr[0]["n"]) if tr
        else "no model request carried the tool result with id %r" % env.get("id"))
PY
    local status name detail
    while IFS=$'\t' read -r status name detail; do
        if [[ $status == PASS ]]; then pass "$agent" "$name" "$detail"; else fail "$agent" "$name" "$detail"; fi
    done <"$d/checks1.out"
    # task-completed: the outcome envelope (line 2 of --wait) says completed/end_turn with
    # the mock's last answer as the agent's final text.
    local verdict
    verdict=$(RC=$rc TASK=$task1 OUT=$d/task1.out MAIL=$d/mail1.json REQS=$d/requests1.log python3 - <<'PY' 2>&1 || true
import json, os
rc, task = int(os.environ["RC"]), os.environ["TASK"]
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
reqs = [json.loads(l) for l in open(os.environ["REQS"]) if l.strip()]
# The agent's final answer is the mock's reply to the request that carried the send tool's
# result (the envelope id) back: the turn ends there. Side requests may come later and carry
# tools and history too (Claude Code 2.1.332's prompt suggestions, "[SUGGESTION MODE: …]",
# sometimes arrive before the task settles), so "the last text reply" is not the answer.
try:
    mail_id = json.loads(open(os.environ["MAIL"]).readline()).get("id")
except (OSError, ValueError, AttributeError):
    mail_id = None
marks = ('"tool_result"', '"function_call_output"', '"functionResponse"', '"role": "tool"')
after = [r for r in reqs if mail_id and mail_id in json.dumps(r.get("body"))
         and any(m in json.dumps(r.get("body")) for m in marks)]
want = after[0]["reply"][1] if after and after[0]["reply"][0] == "text" else None
try:
    env = json.loads(lines[1])
except (IndexError, ValueError):
    raise SystemExit("FAIL\tno outcome envelope from --wait (exit %d): %s" % (rc, lines[-1:] if lines else "no output"))
b = env.get("body") or {}
bad = []
if rc != 0: bad.append("exit %d" % rc)
if env.get("from") != "hub" or env.get("kind") != "task_outcome" or env.get("correlationId") != task:
    bad.append("envelope from %r kind %r correlationId %r" % (env.get("from"), env.get("kind"), env.get("correlationId")))
if b.get("state") != "completed": bad.append("state %r (reason %r)" % (b.get("state"), b.get("reason")))
if b.get("stopReason") != "end_turn": bad.append("stopReason %r" % b.get("stopReason"))
if not want or not str(b.get("text", "")).strip().endswith(want): bad.append("text %r, wanted it to end with %r" % (str(b.get("text"))[-80:], want))
if bad:
    print("FAIL\t" + "; ".join(bad))
else:
    print("PASS\t%s completed, end_turn, text %r, %d ms%s" % (task, b["text"].strip()[-40:], b.get("elapsedMs", -1),
          (", usage %s" % json.dumps(b["usage"])) if b.get("usage") else ""))
PY
    )
    if [[ $verdict == PASS* ]]; then pass "$agent" task-completed "${verdict#PASS	}"; else fail "$agent" task-completed "${verdict#FAIL	}"; fi
    check_task_usage "$agent" "$d/task1.out" "$d/requests1.log"
    [[ -n $task1 ]] && check_reaped "$agent" task-reaped "$task1" "$d/hub/service.log"
    note "$agent" "task 1 took ${took1}s"

    # Task 2, cancelled while running: the mock holds its answer to the tool result (the gate
    # is closed), so once the agent's mail is in, the task is certainly mid-turn.
    rm -f "$d/gate"
    t0=$SECONDS
    local task2="" st="" mail2="" running=0
    if ! task2=$("$AH" delegate "${orch[@]}" --agent "$agent" --cwd "$proj" --prompt "$prompt" \
        --timeout "$AGENT_TIMEOUT" 2>"$d/task2.err"); then
        fail "$agent" task-cancelled "delegate refused: $(cat "$d/task2.err")"
    else
        # The first envelope either is the mail (the task runs) or the outcome (it ended early).
        "$AH" await "${orch[@]}" --timeout "$AGENT_TIMEOUT" >"$d/mail2.json" 2>"$d/mail2.err" || true
        mail2=$(python3 -c 'import json,sys; e=json.loads(open(sys.argv[1]).readline()); print(e["kind"], e["from"])' "$d/mail2.json" 2>/dev/null || true)
        if [[ $mail2 != "e2e-task-mail $task2" ]]; then
            fail "$agent" task-cancelled "wanted the task's mail first, got: $(head -c 300 "$d/mail2.json" "$d/mail2.err")"
        else
            running=$(task_procs "$task2" | wc -l)
            note "$agent" "task 2 runs as $running process(es) carrying its mark; cancelling"
            st=$("$AH" task cancel "${orch[@]}" --id "$task2" 2>&1) || true
            "$AH" await "${orch[@]}" --reply-to "$task2" --kind task_outcome --timeout 120 \
                >"$d/task2.out" 2>"$d/task2.await.err" || true
            verdict=$(ST=$st TASK=$task2 OUT=$d/task2.out python3 - <<'PY' 2>&1 || true
import json, os
st, task = os.environ["ST"], os.environ["TASK"]
try:
    env = json.loads(open(os.environ["OUT"]).readline())
except (OSError, ValueError):
    raise SystemExit("FAIL\tcancel answered %r; no outcome envelope" % st)
b = env.get("body") or {}
bad = []
if st != "cancelling": bad.append("cancel answered %r" % st)
if b.get("state") != "cancelled": bad.append("state %r (reason %r)" % (b.get("state"), b.get("reason")))
if bad:
    print("FAIL\t" + "; ".join(bad))
else:
    print("PASS\tcancel answered cancelling; outcome cancelled (%s; stopReason %s) after %d ms" % (
        b.get("reason"), b.get("stopReason", "none"), b.get("elapsedMs", -1)))
PY
            )
            if [[ $verdict == PASS* ]]; then pass "$agent" task-cancelled "${verdict#PASS	}"; else fail "$agent" task-cancelled "${verdict#FAIL	}"; fi
        fi
    fi
    : >"$d/gate" # let the mock's held answer go
    # The hub is stopped at once, while task 2's agent may still be shutting down (three of
    # the four ignore stdin EOF): it must reap the agent before it exits (docs/delegation.md
    # "Durability"). TERM, then up to 30 s (the default drain deadline) before a KILL.
    local i
    stop_pid "$hub_pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$hub_pid" 2>/dev/null && note "$agent" "the hub did not stop within 30 s; killed"
    reap "$hub_pid"
    [[ -n $task2 ]] && check_reaped "$agent" task-cancel-reaped "$task2" "$d/hub/service.log"
    note "$agent" "task 2 (cancelled, then the hub stopped) took $((SECONDS - t0))s"

    # Task 3, under permission = "reject" (issue 29: claude-agent-acp 0.101 starts its
    # sessions in "auto", where Claude Code's classifier decides and the hub is never asked,
    # so "reject" was bypassed). The same hub config with policy reject, the same prompt,
    # the mock answering at once: the session must be put in the agent's asking mode and the
    # agent must ask for the hub's send tool. The hub's own tools are allowed under every
    # policy when the agent names them by a field the hub recognises (issue 37: Claude's
    # _meta.claudeCode.toolName, Gemini's toolCallId): then the mail arrives, and only because
    # the agent asked (unasked, no such log line would exist). Otherwise the hub rejects it and
    # no mail arrives.
    task_hub_config "$d/hub/config-reject.toml" "$work" 'permission = "reject"'
    t0=$SECONDS
    local task3=""
    (cd "$d/hub" && exec env -i "${envv[@]}" "$SERVER" --config "$d/hub/config-reject.toml" \
        >"$d/hub3.out" 2>"$d/hub3.err") &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub3.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail "$agent" task-reject "agent-hub-server (reject) did not start: $(tail -n3 "$d/hub3.err")"
    else
        orch=(--as orchestrator --token-file "$tok" --port "$hub_port")
        rc=0
        "$AH" delegate "${orch[@]}" --agent "$agent" --cwd "$proj" --prompt "$prompt" \
            --timeout "$AGENT_TIMEOUT" --wait --json >"$d/task3.out" 2>"$d/task3.err" || rc=$?
        task3=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$d/task3.out" 2>/dev/null || true)
        # A mail the agent sent is queued before its outcome: a short await finds it.
        "$AH" await "${orch[@]}" --kind e2e-task-mail --timeout 1 >"$d/mail3.json" 2>"$d/mail3.err" || true
        verdict=$(AGENT=$agent RC=$rc TASK=$task3 OUT=$d/task3.out MAIL=$d/mail3.json LOG=$d/hub/service.log python3 - <<'PY' 2>&1 || true
import json, os, re
rc, task = int(os.environ["RC"]), os.environ["TASK"]
# The agents whose hub-tool requests the hub recognises as its own (docs/acp.md "The hub's own
# tools"): allowed under reject too.
own_form = os.environ["AGENT"] in ("claude", "gemini")
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
try:
    b = json.loads(lines[1]).get("body") or {}
except (IndexError, ValueError):
    raise SystemExit("FAIL\tno outcome envelope from --wait (exit %d): %s" % (rc, lines[-1:]))
try:
    mail = json.loads(open(os.environ["MAIL"]).readline())
except (OSError, ValueError):
    mail = None
log = [l for l in open(os.environ["LOG"]).read().splitlines() if ("task %s: " % task) in l] if task else []
asked = [l for l in log if "permission asked for tool " in l]
rejected = [l for l in asked if ": rejected (" in l]
own = [l for l in log if "permission asked for the hub's own tool send: allowed (" in l]
mode = next((m.group(1) for l in log for m in [re.search(r"session mode (\S+): the agent asks", l)] if m), None)
sent = bool(mail and mail.get("from") == task)
bad = []
if b.get("state") != "completed": bad.append("state %r (reason %r)" % (b.get("state"), b.get("reason")))
if own_form:
    if not own: bad.append("the hub did not allow its own send tool (%d other permission requests)" % len(asked))
    if not sent: bad.append("no mail from the task")
else:
    if sent: bad.append("the agent's send went through: %s" % json.dumps(mail)[:200])
    if not rejected: bad.append("the hub rejected nothing (%d permission requests)" % len(asked))
if bad:
    print("FAIL\t" + "; ".join(bad))
elif own_form:
    print("PASS\tsession mode %s; the agent asked for the hub's own send, allowed under reject; the mail arrived; %s, %s" % (
        mode or "(none offered)", b["state"], b.get("stopReason")))
else:
    tool = re.sub(r".*permission asked for tool (.*?): rejected.*", r"\1", rejected[0])
    print("PASS\tsession mode %s; the hub was asked %d time(s) and rejected %s; no mail; %s, %s" % (
        mode or "(none offered)", len(asked), tool, b["state"], b.get("stopReason")))
PY
        )
        if [[ $verdict == PASS* ]]; then pass "$agent" task-reject "${verdict#PASS	}"; else fail "$agent" task-reject "${verdict#FAIL	}"; fi
    fi
    # As after task 2: the hub reaps its agent before it exits (up to its drain deadline).
    stop_pid "$hub_pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    reap "$hub_pid"
    [[ -n $task3 ]] && check_reaped "$agent" task-reject-reaped "$task3" "$d/hub/service.log"
    note "$agent" "task 3 (permission reject) took $((SECONDS - t0))s"
    reap "$mock_pid"
    run_task_asks "$agent" "$d" "$work" "$tok" "$home" "$bin" ${cli_env[@]+"${cli_env[@]}"}
    if [[ $agent == claude || -n ${E2E_FOLLOWUP_ALL:-} ]]; then
        run_task_followup "$agent" "$d" "$work" "$tok" "$home" "$bin" ${cli_env[@]+"${cli_env[@]}"}
    else
        note "$agent" "no follow-up task: Claude Code's is checked (E2E_FOLLOWUP_ALL=1 runs it for every agent)"
    fi
}

# ---- usage and cost on real agents (issue 38 part A) ------------------------------------
# Check task-usage for agent $1 on task 1's outcome (line 2 of `delegate --wait --json`, file
# $2), against the mock's request log $3. The mock answers every Anthropic request with usage
# {input_tokens 10, output_tokens 5} (streamed: 10/1 at message_start, 5 at message_delta),
# every Gemini one with usageMetadata {promptTokenCount 10, candidatesTokenCount 5}, the
# OpenAI ones with 10/5/15: so a token count the agent reports is a multiple of those, at
# most one per model request. Claude Code (both adapters) turns them into ACP's prompt
# `usage` (source acp) and prices them into usage_update.cost (USD, source acp); Gemini CLI
# 0.61 reports only `_meta.quota.token_count` (source acp-meta) and no cost
# (docs/delegation.md "Cost and usage"). Codex and OpenCode report nothing the built-in
# manifests promise (`reports` empty): what their outcome carries is printed as a note, not
# checked. The figures are printed either way, for docs/agents.md.
check_task_usage() {
    local agent=$1 out=$2 reqs=$3 verdict
    verdict=$(AGENT=$agent OUT=$out REQS=$reqs python3 - <<'PY' 2>&1 || true
import json, math, os
agent = os.environ["AGENT"]
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
try:
    b = json.loads(lines[1]).get("body") or {}
except (IndexError, ValueError):
    raise SystemExit("FAIL\tno outcome envelope to read usage from")
reqs = [l for l in open(os.environ["REQS"]) if l.strip()] if os.path.exists(os.environ["REQS"]) else []
u, c = b.get("usage"), b.get("cost")
seen = "usage %s, cost %s, context %s (%d model requests)" % (
    json.dumps(u), json.dumps(c), json.dumps(b.get("context")), len(reqs))
bad = []
def tokens(source, per_in, per_out):
    if not isinstance(u, dict):
        bad.append("no usage")
        return
    if u.get("source") != source:
        bad.append("usage source %r, wanted %r" % (u.get("source"), source))
    for key, per in (("inputTokens", per_in), ("outputTokens", per_out)):
        v = u.get(key)
        # At least one request's worth, a whole number of them, no more than the mock answered.
        if not (isinstance(v, int) and v >= per and v % per == 0 and v <= per * len(reqs)):
            bad.append("%s %r is not a multiple of the mock's %d within %d requests" % (key, v, per, len(reqs)))
if agent == "claude":
    tokens("acp", 10, 5)
    if not isinstance(c, dict):
        bad.append("no cost")
    else:
        a = c.get("amount")
        if not (isinstance(a, (int, float)) and math.isfinite(a) and 0 < a < 1):
            bad.append("cost amount %r" % a)
        if c.get("currency") != "USD" or c.get("source") != "acp":
            bad.append("cost currency %r source %r" % (c.get("currency"), c.get("source")))
elif agent == "gemini":
    tokens("acp-meta", 10, 5)
    if c is not None:
        bad.append("a cost Gemini never reports: %s" % json.dumps(c))
else:
    raise SystemExit("NOTE\t" + seen)
print(("FAIL\t%s; " % "; ".join(bad) if bad else "PASS\t") + seen)
PY
    )
    case $verdict in
        PASS*) pass "$agent" task-usage "${verdict#PASS	}" ;;
        NOTE*) note "$agent" "task 1's outcome (not checked: its manifest reports nothing): ${verdict#NOTE	}" ;;
        *) fail "$agent" task-usage "${verdict#FAIL	}" ;;
    esac
}

# ---- a follow-up on a real agent (issue 38 part B) ----------------------------------------
# Task 7 (Claude Code, both sets): a fresh mock (no tool call, no gate) and a fresh hub whose
# [tasks] keep sessions (session_keep_secs = 120; docs/delegation.md "Follow-ups"). Turn 1:
# `delegate --keep 120 --wait --json` with a prompt holding a nonce; its outcome must say turn
# 1, completed, session kept, keptUntil. Turn 2: `task prompt --id TASK --prompt …` must
# print `turn 2`, and `await --reply-to TASK --kind task_outcome` its outcome: turn 2,
# completed, end_turn, the text the mock's answer to turn 2, session kept. One session: the
# hub started one agent process for the task (one "agent started" line) and the model
# request of turn 2 carried turn 1's prompt (the nonce) and turn 1's answer as history. The
# outcome's usage and cost are the task's totals: turn 2's exceed turn 1's (checked where
# the agent reports them). Then `task close` must answer `completed` (the last turn's state),
# the record say session closed with 2 turns, and the agent be reaped. Checks
# task-followup-kept, task-followup, task-followup-closed, task-followup-reaped. $1 agent,
# $2 its work folder, $3 the tasks' root, $4 orchestrator's token file, $5 HOME, $6 the
# adapter; the rest go on TASK_ENV.
run_task_followup() {
    local agent=$1 d=$2 work=$3 tok=$4 home=$5 bin=$6
    shift 6
    local mock_port mock_pid hub_pid hub_port t0=$SECONDS i rc=0 task="" said="" closed="" nonce7
    local out=$d/followup
    MOCK_LOG=$d/mock-followup.log MOCK_REQUEST_LOG=$out.requests.log \
        python3 "$ROOT/scripts/e2e-mock-llm.py" "$MOCK_LLM" 0 >"$d/mock-followup.out" 2>"$d/mock-followup.err" &
    mock_pid=$!
    PIDS+=("$mock_pid")
    if ! mock_port=$(wait_for_line "$d/mock-followup.out" 's/.*on 127\.0\.0\.1:\([0-9]*\)$/\1/p' 15); then
        fail "$agent" task-followup-kept "mock LLM did not start: $(cat "$d/mock-followup.err")"
        return 0
    fi
    # Codex and OpenCode find the mock through their HOME's config, written for task 1's mock.
    point_at_mock "$agent" "$home" "$mock_port" ask
    task_hub_config "$d/hub/config-followup.toml" "$work" "session_keep_secs = 120"
    task_hub_env "$agent" "$home" "$bin" "$mock_port" "$@"
    (cd "$d/hub" && exec env -i "${TASK_ENV[@]}" "$SERVER" --config "$d/hub/config-followup.toml" \
        >"$d/hub7.out" 2>"$d/hub7.err") &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub7.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail "$agent" task-followup-kept "agent-hub-server (session_keep_secs) did not start: $(tail -n3 "$d/hub7.err")"
        reap "$mock_pid"
        return 0
    fi
    note "$agent" "hub keeping sessions (session_keep_secs = 120) on 127.0.0.1:$hub_port, mock LLM on 127.0.0.1:$mock_port"
    local orch=(--as orchestrator --token-file "$tok" --port "$hub_port")
    mkdir -p "$work/followup"
    nonce7=$(nonce)
    "$AH" delegate "${orch[@]}" --agent "$agent" --cwd "$work/followup" --keep 120 \
        --prompt "agent-hub e2e follow-up, turn 1: remember the word w$nonce7" \
        --timeout "$AGENT_TIMEOUT" --wait --json >"$out.1.out" 2>"$out.1.err" || rc=$?
    task=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$out.1.out" 2>/dev/null || true)
    if [[ -n $task ]]; then
        said=$("$AH" task prompt "${orch[@]}" --id "$task" \
            --prompt "agent-hub e2e follow-up, turn 2: which word did I ask you to remember?" 2>&1) || said="exit $?: $said"
        "$AH" await "${orch[@]}" --reply-to "$task" --kind task_outcome --timeout "$AGENT_TIMEOUT" \
            >"$out.2.out" 2>"$out.2.err" || true
        closed=$("$AH" task close "${orch[@]}" --id "$task" 2>&1) || closed="exit $?: $closed"
        "$AH" task status "${orch[@]}" --id "$task" --json >"$out.record.json" 2>"$out.record.err" || true
    fi
    local verdicts
    verdicts=$(AGENT=$agent RC=$rc TASK=$task NONCE=w$nonce7 SAID=$said CLOSED=$closed OUT=$out \
        LOG=$d/hub/service.log python3 - <<'PY' 2>&1 || true
import json, os
agent, rc, task, nonce = os.environ["AGENT"], int(os.environ["RC"]), os.environ["TASK"], os.environ["NONCE"]
out = os.environ["OUT"]
def line(name, bad, good):
    print("%s\t%s\t%s" % ("FAIL" if bad else "PASS", name, "; ".join(bad) if bad else good))
def outcome(path, n):
    try:
        lines = [l for l in open(path).read().splitlines() if l.strip()]
        return json.loads(lines[n]).get("body") or {}
    except (OSError, IndexError, ValueError):
        return None
reqs = [json.loads(l) for l in open(out + ".requests.log") if l.strip()] if os.path.exists(out + ".requests.log") else []
def users(body):
    """The user messages of a model request (Anthropic messages, Gemini contents, OpenAI
    input), each as JSON text. Claude Code puts a system reminder before the prompt in the same
    message, and a "system" message after it: the prompt is in the last user one."""
    items = (body.get("messages") or []) + (body.get("contents") or []) + (
        body.get("input") if isinstance(body.get("input"), list) else [])
    return [json.dumps(m.get("content", m.get("parts"))) for m in items
            if isinstance(m, dict) and m.get("role") == "user"]
def answer_to(marker):
    """The mock's text answer to the first request whose user text holds marker and offered
    tools (side requests, prompt suggestions and classifiers, offer none), and that request."""
    for r in reqs:
        body = r.get("body") or {}
        if r["reply"][0] == "text" and body.get("tools") and any(marker in t for t in users(body)[-1:]):
            return r["reply"][1], r
    return None, None
o1 = outcome(out + ".1.out", 1)
a1, r1 = answer_to("turn 1: remember")
bad = []
if o1 is None:
    bad.append("no turn 1 outcome from --wait (exit %d): %s" % (rc, open(out + ".1.err").read()[-200:]))
else:
    if rc != 0: bad.append("delegate --wait exit %d" % rc)
    if o1.get("turn") != 1 or o1.get("state") != "completed" or o1.get("session") != "kept" or not o1.get("keptUntil"):
        bad.append("turn %r state %r session %r keptUntil %r (reason %r)" % (
            o1.get("turn"), o1.get("state"), o1.get("session"), o1.get("keptUntil"), o1.get("reason")))
    if not a1 or not str(o1.get("text", "")).strip().endswith(a1):
        bad.append("text %r, wanted the mock's answer %r" % (str(o1.get("text"))[-60:], a1))
line("task-followup-kept", bad, "%s turn 1 completed, session kept until %s, text %r" % (
    task, (o1 or {}).get("keptUntil"), str((o1 or {}).get("text", "")).strip()[-30:]))
o2 = outcome(out + ".2.out", 0)
a2, r2 = answer_to("turn 2: which word")
bad = []
if os.environ["SAID"] != "turn 2":
    bad.append("task prompt printed %r" % os.environ["SAID"])
if o2 is None:
    bad.append("no turn 2 outcome: %s" % open(out + ".2.err").read()[-200:])
else:
    if o2.get("turn") != 2 or o2.get("state") != "completed" or o2.get("stopReason") != "end_turn" or o2.get("session") != "kept":
        bad.append("turn %r state %r stopReason %r session %r (reason %r)" % (
            o2.get("turn"), o2.get("state"), o2.get("stopReason"), o2.get("session"), o2.get("reason")))
    if not a2 or not str(o2.get("text", "")).strip().endswith(a2):
        bad.append("text %r, wanted the mock's answer %r" % (str(o2.get("text"))[-60:], a2))
# One session: turn 2's request holds turn 1's prompt and answer.
if r2 is None:
    bad.append("no model request for turn 2")
else:
    hist = json.dumps(r2.get("body"))
    if nonce not in hist or not a1 or a1 not in hist:
        bad.append("turn 2's model request (mock %d) lacks turn 1's prompt %r or answer %r" % (r2["n"], nonce, a1))
log = [l for l in open(os.environ["LOG"]).read().splitlines() if ("task %s: " % task) in l] if task else []
starts = [l for l in log if "agent started" in l]
if len(starts) != 1:
    bad.append("%d agent processes started for the task" % len(starts))
# The outcome's figures are the task's totals so far: turn 2's include turn 1's.
grew = ""
if o1 and o2 and (o1.get("usage") or o1.get("cost")):
    def tot(o, k): return ((o.get("usage") or {}).get(k) or 0)
    if not tot(o2, "inputTokens") > tot(o1, "inputTokens"):
        bad.append("usage did not grow: turn 1 %s, turn 2 %s" % (json.dumps(o1.get("usage")), json.dumps(o2.get("usage"))))
    c1, c2 = (o1.get("cost") or {}).get("amount"), (o2.get("cost") or {}).get("amount")
    if c1 is not None and not (c2 is not None and c2 > c1):
        bad.append("cost did not grow: turn 1 %r, turn 2 %r" % (c1, c2))
    grew = "; totals turn 1 usage %s cost %s, turn 2 usage %s cost %s" % (
        json.dumps(o1.get("usage")), json.dumps(o1.get("cost")), json.dumps(o2.get("usage")), json.dumps(o2.get("cost")))
line("task-followup", bad, "task prompt said turn 2; turn 2 completed, end_turn, text %r; one agent process; model request %d carried turn 1's prompt and answer%s" % (
    str((o2 or {}).get("text", "")).strip()[-30:], (r2 or {}).get("n", -1), grew))
bad = []
if os.environ["CLOSED"] != "completed":
    bad.append("task close answered %r" % os.environ["CLOSED"])
try:
    rec = json.loads(open(out + ".record.json").read())
    rec = rec.get("task_status", rec) if isinstance(rec, dict) else {}
except (OSError, ValueError):
    rec = {}
sess = (rec.get("session") or {}).get("state")
turns = rec.get("turns") or []
if rec.get("state") != "completed" or sess != "closed" or len(turns) != 2:
    bad.append("record state %r session %r turns %d: %s" % (rec.get("state"), sess, len(turns), json.dumps(rec)[:300]))
line("task-followup-closed", bad, "task close answered completed; the record: session closed, turns %s" % (
    [(t.get("turn"), t.get("state"), t.get("how")) for t in turns]))
PY
    )
    local status name detail
    while IFS=$'\t' read -r status name detail; do
        if [[ $status == PASS ]]; then pass "$agent" "$name" "$detail"; else fail "$agent" "$name" "$detail"; fi
    done <<<"$verdicts"
    [[ -n $task ]] && check_reaped "$agent" task-followup-reaped "$task" "$d/hub/service.log"
    stop_pid "$hub_pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    reap "$hub_pid"
    reap "$mock_pid"
    note "$agent" "task 7 (two turns in one session, then task close) took $((SECONDS - t0))s"
}

# ---- one agent, delegated, asking the delegator (issue 37) --------------------------------
# Tasks 4 and 5 (Claude Code, Gemini CLI) run under the default policy (ask: no permission
# key). The model runs a shell command that writes a file (a read-only command is not asked
# about, ../notes capture37-facts.md §8): the agent asks the hub
# (session/request_permission), the hub holds the request and mails it to the delegator as a
# task_request envelope, which the script awaits (`agent-hub await --kind task_request`) and
# answers with `agent-hub task answer`: task 4 with the agent's allow_once option (the
# command runs and the file exists), task 5 with its reject_once option (no file). Both
# complete. A fresh mock gives the tool call the command as its arguments (its Gemini path
# ignores the prompt's TOOL_ARGS; the wrapper's MOCK_TOOL_ARGS sets them), a fresh hub runs
# on it, and each task has a folder of its own. Task 6 (Claude Code through the maintained
# adapter, @agentclientprotocol/claude-agent-acp): the model calls AskUserQuestion; told by
# the hub's initialize that the client takes forms (elicitation.form, under ask only), the
# adapter asks it as an elicitation/create form, which reaches the delegator as a
# task_request of type question; the script accepts with the form's content, which must
# come back to the model as the tool's result. $1 agent, $2 its work folder, $3 the tasks'
# root, $4 orchestrator's token file, $5 HOME, $6 the adapter; the rest go on TASK_ENV.
run_task_asks() {
    local agent=$1 d=$2 work=$3 tok=$4 home=$5 bin=$6
    shift 6
    local tool args mock_port mock_pid hub_pid hub_port t0=$SECONDS i
    case $agent in
        claude) tool=Bash ;;
        gemini) tool=run_shell_command ;;
        *)
            note "$agent" "no request tasks: its requests for the hub's send are not recognised, so this phase runs it under permission allow"
            return 0 ;;
    esac
    args='{"command": "echo e2e-agents > proof.txt"}'
    MOCK_LOG=$d/mock-ask.log MOCK_REQUEST_LOG=$d/requests-ask.log MOCK_TOOL_ARGS=$args \
        python3 "$ROOT/scripts/e2e-mock-llm.py" "$MOCK_LLM" 0 >"$d/mock-ask.out" 2>"$d/mock-ask.err" &
    mock_pid=$!
    PIDS+=("$mock_pid")
    if ! mock_port=$(wait_for_line "$d/mock-ask.out" 's/.*on 127\.0\.0\.1:\([0-9]*\)$/\1/p' 15); then
        fail "$agent" task-ask-allow "mock LLM did not start: $(cat "$d/mock-ask.err")"
        return 0
    fi
    task_hub_config "$d/hub/config-ask.toml" "$work" ""
    task_hub_env "$agent" "$home" "$bin" "$mock_port" "$@"
    (cd "$d/hub" && exec env -i "${TASK_ENV[@]}" "$SERVER" --config "$d/hub/config-ask.toml" \
        >"$d/hub4.out" 2>"$d/hub4.err") &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub4.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail "$agent" task-ask-allow "agent-hub-server (ask) did not start: $(tail -n3 "$d/hub4.err")"
        reap "$mock_pid"
        return 0
    fi
    note "$agent" "hub under the default permission (ask) on 127.0.0.1:$hub_port, mock LLM (tool arguments $args) on 127.0.0.1:$mock_port"
    local orch=(--as orchestrator --token-file "$tok" --port "$hub_port") ran=() want
    for want in allow reject; do
        mkdir -p "$work/$want"
        ask_task "$agent" "$want" "$work/$want" "$d" \
            "agent-hub e2e task: CALL_TOOL:$tool TOOL_ARGS:$args" "${orch[@]}"
        [[ -n $ASKED_TASK ]] && ran+=("task-ask-$want-reaped:$ASKED_TASK")
    done
    if [[ $agent == claude ]]; then
        local pkg
        pkg=$(bin_package "$bin")
        if [[ $pkg == @agentclientprotocol/claude-agent-acp\ * ]]; then
            mkdir -p "$work/question"
            question_task "$work/question" "$d" "${orch[@]}"
            [[ -n $ASKED_TASK ]] && ran+=("task-question-reaped:$ASKED_TASK")
        else
            note "$agent" "no question task: $pkg never sends elicitation/create (AskUserQuestion is always disallowed there; ../notes capture37-facts.md §6)"
        fi
    fi
    stop_pid "$hub_pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    reap "$hub_pid"
    local r
    for r in "${ran[@]}"; do
        check_reaped "$agent" "${r%%:*}" "${r#*:}" "$d/hub/service.log"
    done
    reap "$mock_pid"
    note "$agent" "tasks 4-$((${#ran[@]} + 3)) (requests answered by the delegator) took $((SECONDS - t0))s"
}

# One task whose agent asks to run the command: delegated with --wait, its task_request
# awaited, answered with the agent's allow_once ($2 allow) or reject_once ($2 reject)
# option. Check task-ask-$2. $3 the task's cwd, $4 the agent's work folder, $5 the prompt,
# the rest orchestrator's connection options. Sets ASKED_TASK to the task id (empty if none).
ask_task() {
    local agent=$1 want=$2 cwd=$3 d=$4 prompt=$5
    shift 5
    local orch=("$@") waiter rc=0 chosen="" answered="" out=$d/ask-$want
    ASKED_TASK=""
    "$AH" delegate "${orch[@]}" --agent "$agent" --cwd "$cwd" --prompt "$prompt" \
        --timeout "$AGENT_TIMEOUT" --wait --json >"$out.out" 2>"$out.err" &
    waiter=$!
    PIDS+=("$waiter")
    "$AH" await "${orch[@]}" --kind task_request --timeout "$AGENT_TIMEOUT" \
        >"$out.request.json" 2>"$out.request.err" &
    PIDS+=("$!")
    await_while "$!" "$waiter"
    # The option to answer with: the first of the kind wanted, as the envelope offers it.
    chosen=$(KIND="${want}_once" python3 -c '
import json, os, sys
b = json.loads(open(sys.argv[1]).readline())["body"]
print("\t".join([b["task"], b["request"], next(o["optionId"] for o in b["options"] if o["kind"] == os.environ["KIND"])]))
' "$out.request.json" 2>/dev/null || true)
    if [[ -n $chosen ]]; then
        local task request option
        IFS=$'\t' read -r task request option <<<"$chosen"
        answered=$("$AH" task answer "${orch[@]}" --id "$task" --request "$request" \
            --option "$option" 2>&1) || answered="exit $?: $answered"
    fi
    wait "$waiter" || rc=$?
    forget "$waiter"
    ASKED_TASK=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$out.out" 2>/dev/null || true)
    local verdict
    verdict=$(WANT=$want RC=$rc TASK=$ASKED_TASK OUT=$out.out REQ=$out.request.json \
        ANSWERED=$answered CWD=$cwd LOG=$d/hub/service.log python3 - <<'PY' 2>&1 || true
import json, os
want, rc, task = os.environ["WANT"], int(os.environ["RC"]), os.environ["TASK"]
bad = []
try:
    env = json.loads(open(os.environ["REQ"]).readline())
except (OSError, ValueError):
    raise SystemExit("FAIL\tno task_request envelope reached the delegator (delegate exit %d)" % rc)
b = env.get("body") or {}
tc = b.get("toolCall") or {}
if env.get("from") != "hub" or env.get("kind") != "task_request" or env.get("correlationId") != task:
    bad.append("envelope from %r kind %r correlationId %r (task %r)" % (env.get("from"), env.get("kind"), env.get("correlationId"), task))
if b.get("state") != "open" or b.get("type") != "permission":
    bad.append("state %r type %r" % (b.get("state"), b.get("type")))
if tc.get("kind") != "execute":
    bad.append("toolCall.kind %r" % tc.get("kind"))
# Claude's adapters put the command in rawInput.command (the body's command) and the title;
# Gemini CLI in the title only (capture §8).
shown = tc.get("command") or tc.get("title") or ""
if "proof.txt" not in shown:
    bad.append("the command is not shown: toolCall %s" % json.dumps(tc)[:200])
option = next((o for o in b.get("options", []) if o.get("kind") == want + "_once"), None)
if option is None:
    bad.append("no %s_once option among %s" % (want, [o.get("optionId") for o in b.get("options", [])]))
elif os.environ["ANSWERED"] != "answered %s with %s" % (b.get("request"), option["optionId"]):
    bad.append("task answer said %r" % os.environ["ANSWERED"])
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
try:
    o = json.loads(lines[1]).get("body") or {}
except (IndexError, ValueError):
    o = {}
    bad.append("no outcome envelope from --wait (exit %d)" % rc)
if o and (o.get("state") != "completed" or o.get("stopReason") != "end_turn"):
    bad.append("outcome %r %r (reason %r)" % (o.get("state"), o.get("stopReason"), o.get("reason")))
ran = os.path.exists(os.path.join(os.environ["CWD"], "proof.txt"))
if ran != (want == "allow"):
    bad.append("proof.txt %s" % ("was written" if ran else "is missing"))
log = [l for l in open(os.environ["LOG"]).read().splitlines() if ("task %s: " % task) in l]
word = "allowed" if want == "allow" else "rejected"
said = [l for l in log if ": %s (" % word in l and "(answered by the owner)" in l]
if not said:
    bad.append("the service log has no answer by the owner: %s" % [l[-120:] for l in log if "request" in l][:3])
if bad:
    print("FAIL\t" + "; ".join(bad))
else:
    print("PASS\t%s asked to run %r (options %s); answered %s; the agent went on: proof.txt %s; %s, %s" % (
        b["request"], shown[:60], ",".join(x["optionId"] for x in b["options"]), option["optionId"],
        "written" if ran else "not written", o["state"], o["stopReason"]))
PY
    )
    if [[ $verdict == PASS* ]]; then pass "$agent" "task-ask-$want" "${verdict#PASS	}"; else fail "$agent" "task-ask-$want" "${verdict#FAIL	}"; fi
}

# Task 6: the model's AskUserQuestion reaches the delegator as a question and the script's
# answer reaches the model. $1 the task's cwd, $2 the agent's work folder, the rest
# orchestrator's connection options. Sets ASKED_TASK.
question_task() {
    local cwd=$1 d=$2
    shift 2
    local orch=("$@") waiter rc=0 answered="" out=$d/question task="" request=""
    local question='{"questions": [{"question": "Which color should the e2e use?", "header": "Color", "options": [{"label": "Red", "description": "the red one"}, {"label": "Blue", "description": "the blue one"}], "multiSelect": false}]}'
    ASKED_TASK=""
    "$AH" delegate "${orch[@]}" --agent claude --cwd "$cwd" \
        --prompt "agent-hub e2e task: CALL_TOOL:AskUserQuestion TOOL_ARGS:$question" \
        --timeout "$AGENT_TIMEOUT" --wait --json >"$out.out" 2>"$out.err" &
    waiter=$!
    PIDS+=("$waiter")
    "$AH" await "${orch[@]}" --kind task_request --timeout "$AGENT_TIMEOUT" \
        >"$out.request.json" 2>"$out.request.err" &
    PIDS+=("$!")
    await_while "$!" "$waiter"
    IFS=$'\t' read -r task request < <(python3 -c '
import json, sys
b = json.loads(open(sys.argv[1]).readline())["body"]
print(b["task"] + "\t" + b["request"])' "$out.request.json" 2>/dev/null || true) || true
    if [[ -n $request ]]; then
        # The form's content: the adapter's schema names the first question question_0.
        answered=$("$AH" task answer "${orch[@]}" --id "$task" --request "$request" \
            --option accept --message '{"question_0":"Blue"}' 2>&1) || answered="exit $?: $answered"
    fi
    wait "$waiter" || rc=$?
    forget "$waiter"
    ASKED_TASK=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$out.out" 2>/dev/null || true)
    local verdict
    verdict=$(RC=$rc TASK=$ASKED_TASK OUT=$out.out REQ=$out.request.json ANSWERED=$answered \
        REQS=$d/requests-ask.log python3 - <<'PY' 2>&1 || true
import json, os
rc, task = int(os.environ["RC"]), os.environ["TASK"]
bad = []
try:
    env = json.loads(open(os.environ["REQ"]).readline())
except (OSError, ValueError):
    raise SystemExit("FAIL\tno task_request envelope reached the delegator (delegate exit %d)" % rc)
b = env.get("body") or {}
if env.get("from") != "hub" or env.get("correlationId") != task:
    bad.append("envelope from %r correlationId %r (task %r)" % (env.get("from"), env.get("correlationId"), task))
if b.get("type") != "question" or b.get("message") != "Which color should the e2e use?":
    bad.append("type %r message %r" % (b.get("type"), b.get("message")))
try:
    schema = json.loads(b.get("schema") or "")
except ValueError:
    schema = {}
if "question_0" not in (schema.get("properties") or {}):
    bad.append("schema %r" % (b.get("schema") or "")[:200])
if [o.get("optionId") for o in b.get("options", [])] != ["accept", "decline", "cancel"]:
    bad.append("options %s" % b.get("options"))
if os.environ["ANSWERED"] != "answered %s with accept" % b.get("request"):
    bad.append("task answer said %r" % os.environ["ANSWERED"])
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
try:
    o = json.loads(lines[1]).get("body") or {}
except (IndexError, ValueError):
    o = {}
    bad.append("no outcome envelope from --wait (exit %d)" % rc)
if o and o.get("state") != "completed":
    bad.append("outcome %r (reason %r)" % (o.get("state"), o.get("reason")))
# The answer went back to the model as the AskUserQuestion tool's result.
reqs = [json.loads(l) for l in open(os.environ["REQS"]) if l.strip()]
def results(body):
    for m in body.get("messages") or []:
        for c in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(c, dict) and c.get("type") == "tool_result":
                yield json.dumps(c.get("content"))
got = [r["n"] for r in reqs if any("Blue" in t and "Which color" in t for t in results(r.get("body") or {}))]
if not got:
    bad.append("no model request carried the answer Blue as the tool's result")
if bad:
    print("FAIL\t" + "; ".join(bad))
else:
    print("PASS\t%s: a question (elicitation/create form) with schema keys %s; accepted with {\"question_0\":\"Blue\"}; model request %d got the answer as the tool result; %s" % (
        b["request"], sorted(schema["properties"]), got[0], o["state"]))
PY
    )
    if [[ $verdict == PASS* ]]; then pass claude task-question "${verdict#PASS	}"; else fail claude task-question "${verdict#FAIL	}"; fi
}

# ---- the headless phase: a headless Claude Code asks its delegator (issue 37 design §6) -----
# The built-in claude runs headless when its ACP adapter is not on the hub's PATH (here it is
# not: PATH holds the Claude Code CLI's folder only). Its run.headless_mcp gives `claude -p`
# the hub's MCP server (a config file in the task's folder) and `--permission-prompt-tool
# mcp__<server>__permission_prompt`; under the default policy (ask) its Bash call reaches the
# delegator as a task_request with the options allow and deny, and `agent-hub task answer`
# decides it. Checks headless-ask-allow (the command ran: proof.txt) and headless-ask-deny
# (it did not; the deny's message reached the model as the tool's result), each also that the
# hub ran it headless with its MCP server, and that the agent was reaped.
run_headless_asks() {
    local agent=$1 bin d home work hub_port mock_port mock_pid hub_pid tok token t0=$SECONDS i
    if [[ $agent != claude ]]; then
        note "$agent" "no headless phase: only Claude Code has a permission-prompt tool (run.headless_mcp)"
        return 0
    fi
    if ! bin=$(agent_bin claude 2>"$WORK/claude-headless-install.err"); then
        skip claude "headless: $(tail -n1 "$WORK/claude-headless-install.err")"
        return 0
    fi
    NRAN=$((NRAN + 1))
    echo "e2e: [claude] headless task through the permission prompt tool: $(bin_package "$bin") ($bin)"
    d=$WORK/claude-headless
    home=$d/home
    mkdir -p "$home" "$d/work" "$d/hub/tokens"
    work=$(cd "$d/work" && pwd -P)
    local args='{"command": "echo e2e-headless > proof.txt"}'
    MOCK_LOG=$d/mock.log MOCK_REQUEST_LOG=$d/requests.log MOCK_TOOL_ARGS=$args \
        python3 "$ROOT/scripts/e2e-mock-llm.py" "$MOCK_LLM" 0 >"$d/mock.out" 2>"$d/mock.err" &
    mock_pid=$!
    PIDS+=("$mock_pid")
    if ! mock_port=$(wait_for_line "$d/mock.out" 's/.*on 127\.0\.0\.1:\([0-9]*\)$/\1/p' 15); then
        fail claude headless-ask-allow "mock LLM did not start: $(cat "$d/mock.err")"
        return 0
    fi
    point_at_mock claude "$home" "$mock_port"
    token=$(nonce)$(nonce)
    printf '[agents]\norchestrator = "%s"\n' "$token" >"$d/hub/roster.toml"
    printf '%s\n' "$token" >"$d/hub/tokens/orchestrator.token"
    chmod 600 "$d/hub/roster.toml" "$d/hub/tokens/orchestrator.token"
    tok=$d/hub/tokens/orchestrator.token
    task_hub_config "$d/hub/config.toml" "$work" ""
    task_hub_env claude "$home" "$bin" "$mock_port"
    (cd "$d/hub" && exec env -i "${TASK_ENV[@]}" "$SERVER" --config "$d/hub/config.toml" \
        >"$d/hub.out" 2>"$d/hub.err") &
    hub_pid=$!
    PIDS+=("$hub_pid")
    if ! hub_port=$(wait_for_line "$d/hub.out" 's/.*listening on 127\.0\.0\.1:\([0-9]*\);.*/\1/p' 15); then
        fail claude headless-ask-allow "agent-hub-server did not start: $(tail -n3 "$d/hub.err")"
        reap "$mock_pid"
        return 0
    fi
    note claude "hub under the default permission (ask) on 127.0.0.1:$hub_port, mock LLM (Bash $args) on 127.0.0.1:$mock_port"
    local orch=(--as orchestrator --token-file "$tok" --port "$hub_port") ran=() want
    for want in allow deny; do
        mkdir -p "$work/$want"
        headless_ask_task "$want" "$work/$want" "$d" \
            "agent-hub e2e headless: CALL_TOOL:Bash TOOL_ARGS:$args" "${orch[@]}"
        [[ -n $ASKED_TASK ]] && ran+=("headless-ask-$want-reaped:$ASKED_TASK")
    done
    stop_pid "$hub_pid"
    for ((i = 0; i < 300; i++)); do kill -0 "$hub_pid" 2>/dev/null || break; sleep 0.1; done
    reap "$hub_pid"
    local r
    for r in "${ran[@]}"; do
        check_headless_reaped "${r%%:*}" "${r#*:}" "$d/hub/service.log"
    done
    reap "$mock_pid"
    note claude "headless tasks (permission prompts answered by the delegator) took $((SECONDS - t0))s"
}

# Checks (name $1) that headless task $2's agent is gone: the hub logged its outcome (a
# headless runner's outcome comes after the agent's exit: it reads stdout to its end and reaps
# the process group first; $3 is the service log) and no process carries the task's mark (its
# MCP server, `agent-hub mcp`, included). Waits up to 20 s; a survivor is a FAIL, killed by PID.
check_headless_reaped() {
    local name=$1 task=$2 log=$3 i left="" outcome=""
    for ((i = 0; i < 200; i++)); do
        left=$(task_procs "$task")
        outcome=$(sed -n "s/.* task $task: outcome \([a-z_]*\).*\$/\1/p" "$log" | head -n1)
        [[ -z $left && -n $outcome ]] && break
        sleep 0.1
    done
    if [[ -z $left && -n $outcome ]]; then
        pass claude "$name" "the hub reaped the agent (outcome $outcome); no process of the task left, its MCP server included"
    elif [[ -z $left ]]; then
        fail claude "$name" "no process left, but the hub never logged the outcome"
    else
        fail claude "$name" "still running: $(for p in $left; do tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80; done | tr '\n' ';')"
        for p in $left; do kill -KILL "$p" 2>/dev/null || true; done
    fi
}

# One headless task: delegated with --wait, its task_request awaited and answered `allow` or
# `deny` (with a message) by $1. $2 the task's cwd, $3 the phase's folder, $4 the prompt, the
# rest orchestrator's connection options. Sets ASKED_TASK.
headless_ask_task() {
    local want=$1 cwd=$2 d=$3 prompt=$4
    shift 4
    local orch=("$@") waiter rc=0 answered="" out=$d/ask-$want task="" request=""
    local message="e2e-headless denies this: use another way"
    ASKED_TASK=""
    "$AH" delegate "${orch[@]}" --agent claude --cwd "$cwd" --prompt "$prompt" \
        --timeout "$AGENT_TIMEOUT" --wait --json >"$out.out" 2>"$out.err" &
    waiter=$!
    PIDS+=("$waiter")
    "$AH" await "${orch[@]}" --kind task_request --timeout "$AGENT_TIMEOUT" \
        >"$out.request.json" 2>"$out.request.err" &
    PIDS+=("$!")
    await_while "$!" "$waiter"
    IFS=$'\t' read -r task request < <(python3 -c '
import json, sys
b = json.loads(open(sys.argv[1]).readline())["body"]
print(b["task"] + "\t" + b["request"])' "$out.request.json" 2>/dev/null || true) || true
    if [[ -n $request ]]; then
        if [[ $want == allow ]]; then
            answered=$("$AH" task answer "${orch[@]}" --id "$task" --request "$request" \
                --option allow 2>&1) || answered="exit $?: $answered"
        else
            answered=$("$AH" task answer "${orch[@]}" --id "$task" --request "$request" \
                --option deny --message "$message" 2>&1) || answered="exit $?: $answered"
        fi
    fi
    wait "$waiter" || rc=$?
    forget "$waiter"
    ASKED_TASK=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["task"])' "$out.out" 2>/dev/null || true)
    local verdict
    verdict=$(WANT=$want RC=$rc TASK=$ASKED_TASK OUT=$out.out REQ=$out.request.json \
        ANSWERED=$answered CWD=$cwd LOG=$d/hub/service.log REQS=$d/requests.log MESSAGE=$message \
        python3 - <<'PY' 2>&1 || true
import json, os
want, rc, task = os.environ["WANT"], int(os.environ["RC"]), os.environ["TASK"]
bad = []
try:
    env = json.loads(open(os.environ["REQ"]).readline())
except (OSError, ValueError):
    raise SystemExit("FAIL\tno task_request envelope reached the delegator (delegate exit %d)" % rc)
b = env.get("body") or {}
tc = b.get("toolCall") or {}
if env.get("from") != "hub" or env.get("correlationId") != task:
    bad.append("envelope from %r correlationId %r (task %r)" % (env.get("from"), env.get("correlationId"), task))
if b.get("state") != "open" or b.get("type") != "permission" or b.get("agent") != "claude":
    bad.append("state %r type %r agent %r" % (b.get("state"), b.get("type"), b.get("agent")))
if tc.get("title") != "Bash" or tc.get("kind") != "execute" or "proof.txt" not in (tc.get("command") or ""):
    bad.append("toolCall %s" % json.dumps(tc)[:200])
opts = [(o.get("optionId"), o.get("kind")) for o in b.get("options", [])]
if opts != [("allow", "allow_once"), ("deny", "reject_once")]:
    bad.append("options %s" % opts)
if os.environ["ANSWERED"] != "answered %s with %s" % (b.get("request"), want):
    bad.append("task answer said %r" % os.environ["ANSWERED"])
lines = [l for l in open(os.environ["OUT"]).read().splitlines() if l.strip()]
try:
    o = json.loads(lines[1]).get("body") or {}
except (IndexError, ValueError):
    o = {}
    bad.append("no outcome envelope from --wait (exit %d)" % rc)
if o and o.get("state") != "completed":
    bad.append("outcome %r (reason %r)" % (o.get("state"), o.get("reason")))
ran = os.path.exists(os.path.join(os.environ["CWD"], "proof.txt"))
if ran != (want == "allow"):
    bad.append("proof.txt %s" % ("was written" if ran else "is missing"))
log = [l for l in open(os.environ["LOG"]).read().splitlines() if ("task %s: " % task) in l]
if not any("agent started headless" in l and "with the hub's MCP server" in l for l in log):
    bad.append("not run headless with the hub's MCP server: %s" % [l[-120:] for l in log][:3])
if want == "deny":
    # The deny's message went back to the model as the Bash tool's result.
    reqs = [json.loads(l) for l in open(os.environ["REQS"]) if l.strip()]
    def results(body):
        for m in body.get("messages") or []:
            for c in m.get("content") if isinstance(m.get("content"), list) else []:
                if isinstance(c, dict) and c.get("type") == "tool_result":
                    yield json.dumps(c.get("content"))
    if not any(os.environ["MESSAGE"] in t for r in reqs for t in results(r.get("body") or {})):
        bad.append("no model request carried the deny's message as the tool result")
if bad:
    print("FAIL\t" + "; ".join(bad))
else:
    print("PASS\t%s: Bash %r asked through permission_prompt (options allow,deny); answered %s; proof.txt %s; %s" % (
        b["request"], tc["command"][:60], want, "written" if ran else "not written", o["state"]))
PY
    )
    if [[ $verdict == PASS* ]]; then pass claude "headless-ask-$want" "${verdict#PASS	}"; else fail claude "headless-ask-$want" "${verdict#FAIL	}"; fi
}

T0=$SECONDS
for a in "${AGENTS[@]}"; do
    if [[ $PHASE == hook || $PHASE == all ]]; then
        step "$a: hook phase (install the CLI if needed, hub, mock LLM, agent-hub install, headless run)…"
        run_agent "$a"
        step_done
    fi
    if [[ $PHASE == task || $PHASE == all ]]; then
        step "$a: task phase (install the ACP adapter if needed, delegated tasks through ACP)…"
        run_task "$a"
        step_done
    fi
    if [[ $PHASE == headless || $PHASE == all ]]; then
        step "$a: headless phase (a delegated headless task asks through the hub's permission_prompt tool)…"
        run_headless_asks "$a"
        step_done
    fi
done
echo "e2e: took $((SECONDS - T0))s (build included: $((SECONDS - T_START))s)"
echo "e2e: $NPASS passed, $NFAIL failed, $NSKIP skipped"
((NFAIL == 0)) || exit 1
((NRAN > 0)) || exit 77
exit 0
