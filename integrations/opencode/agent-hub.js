// agent-hub plugin for OpenCode: delivers hub mail into a session when it goes idle.
//
// Owns two things. Delivery: on `session.idle` of a top-level session, run `agent-hub drain
// --confirm`, prompt the session with what it prints (`client.session.promptAsync`, which
// starts a new turn at once), and only then confirm, so the hub counts the mail consumed only
// after OpenCode has taken it. Anything that fails leaves the mail queued for the next idle.
// Liveness: when the top-level session turns busy or idle (`session.status`, `session.idle`)
// it runs `agent-hub hook turn-start|turn-end --pid <OpenCode's pid>`, so `who` shows the
// agent busy or idle, and gone once OpenCode exits (SPEC §14.1). The plugin never throws into
// OpenCode. The agent-hub binary is run with an argv, never through a shell. See
// docs/delivery.md.
//
// Install: `agent-hub install --agent opencode` copies this file into OpenCode's plugins folder
// with the identity filled in below. By hand: copy it to ~/.config/opencode/plugins/ (or
// <repo>/.opencode/plugins/) and set AGENT_HUB_AS, AGENT_HUB_TOKEN_FILE and AGENT_HUB_PORT
// (and AGENT_HUB_BIN if agent-hub is not on PATH) in OpenCode's environment, or edit the
// values below.

import { spawn } from "node:child_process"

// Filled in by `agent-hub install` (JSON-escaped); a value still in its @…@ form counts as
// unset. The environment overrides each one.
const INSTALLED = {
  bin: "@AGENT_HUB_COMMAND@",
  name: "@AGENT_HUB_AS@",
  tokenFile: "@AGENT_HUB_TOKEN_FILE@",
  port: "@AGENT_HUB_PORT@",
}

function filled(v) {
  return typeof v === "string" && !/^@AGENT_HUB_[A-Z_]+@$/.test(v) ? v : ""
}

const CONFIG = {
  bin: process.env.AGENT_HUB_BIN || filled(INSTALLED.bin) || "agent-hub",
  name: process.env.AGENT_HUB_AS || filled(INSTALLED.name),
  tokenFile: process.env.AGENT_HUB_TOKEN_FILE || filled(INSTALLED.tokenFile),
  port: process.env.AGENT_HUB_PORT || filled(INSTALLED.port),
  // Injections in a row (each idle that found mail) before one idle is left alone: bounds
  // agent-to-agent ping-pong, like the stop hook's block cap. The mail waits for the next
  // idle, which comes after the user's next prompt.
  maxInjections: Number(process.env.AGENT_HUB_MAX_INJECTIONS || 5),
}

// Longer than agent-hub's own bounds (10 s taking, 20 s waiting for the confirmation).
const DRAIN_TIMEOUT_MS = 45_000
const MAX_OUTPUT_BYTES = 8 * 1024 * 1024

function configured() {
  return Boolean(CONFIG.name && CONFIG.tokenFile && /^[0-9]{1,5}$/.test(String(CONFIG.port)))
}

async function log(client, level, message) {
  try {
    await client?.app?.log?.({ body: { service: "agent-hub", level, message } })
  } catch {
    // Logging is best effort.
  }
}

// Runs `agent-hub drain --confirm`. Resolves to { text, confirm(ok) } when it printed mail,
// or null when there is none or it failed. confirm(true) acks; confirm(false) gives the mail
// back to the hub.
function drain(client) {
  return new Promise((resolve) => {
    const args = [
      "drain", "--as", CONFIG.name, "--token-file", CONFIG.tokenFile,
      "--port", String(CONFIG.port), "--format", "text", "--confirm",
    ]
    let child
    try {
      child = spawn(CONFIG.bin, args, { stdio: ["pipe", "pipe", "pipe"] })
    } catch (e) {
      log(client, "warn", `cannot run ${CONFIG.bin}: ${e}`)
      return resolve(null)
    }
    const chunks = []
    let size = 0
    let stderr = ""
    let settled = false
    const exited = new Promise((done) => child.on("close", (code) => done(code)))
    const timer = setTimeout(() => child.kill("SIGKILL"), DRAIN_TIMEOUT_MS)
    exited.then(() => clearTimeout(timer))
    child.on("error", (e) => {
      log(client, "warn", `cannot run ${CONFIG.bin}: ${e}`)
      if (!settled) { settled = true; resolve(null) }
    })
    child.stdin.on("error", () => {}) // it may exit before reading: nothing to confirm then
    child.stderr.on("data", (d) => { stderr += d })
    child.stdout.on("data", (d) => {
      size += d.length
      if (size > MAX_OUTPUT_BYTES) child.kill("SIGKILL")
      else chunks.push(d)
    })
    // drain closes stdout once the mail is printed, then waits for the confirmation.
    child.stdout.on("end", () => {
      if (settled) return
      settled = true
      const text = Buffer.concat(chunks).toString("utf8")
      if (!text.trim()) {
        child.stdin.end()
        exited.then((code) => {
          if (code !== 0 && code !== 2) log(client, "warn", `agent-hub drain exited ${code}: ${stderr.trim()}`)
        })
        return resolve(null)
      }
      resolve({
        text,
        confirm: async (ok) => {
          child.stdin.end(ok ? "ok\n" : "")
          const code = await exited
          if (ok && code !== 0) log(client, "warn", `agent-hub drain exited ${code}: ${stderr.trim()}`)
        },
      })
    })
  })
}

// Bounds one liveness report; the command bounds itself well under this (docs/delivery.md).
const TURN_TIMEOUT_MS = 15_000

// Runs `agent-hub hook turn-start|turn-end` naming this process; resolves when it ended. A
// failure is only logged: liveness is advisory, delivery does not wait on it.
function reportTurn(client, busy) {
  return new Promise((resolve) => {
    const args = [
      "hook", busy ? "turn-start" : "turn-end", "--as", CONFIG.name,
      "--token-file", CONFIG.tokenFile, "--port", String(CONFIG.port), "--pid", String(process.pid),
    ]
    let child
    try {
      child = spawn(CONFIG.bin, args, { stdio: ["ignore", "ignore", "ignore"] })
    } catch (e) {
      log(client, "warn", `cannot run ${CONFIG.bin}: ${e}`)
      return resolve()
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), TURN_TIMEOUT_MS)
    child.on("error", () => { clearTimeout(timer); resolve() })
    child.on("close", () => { clearTimeout(timer); resolve() })
  })
}

async function isSubagentSession(client, id) {
  try {
    const res = await client.session.get({ path: { id } })
    return Boolean(res?.data?.parentID)
  } catch {
    return false
  }
}

export const AgentHubPlugin = async ({ client }) => {
  const inFlight = new Set()
  const streak = new Map()
  // Liveness: whether each session is a subagent's (asked once), and the state last reported,
  // so repeated status events cost no process.
  const subagent = new Map()
  let reported = null
  const topLevel = async (id) => {
    if (!subagent.has(id)) subagent.set(id, await isSubagentSession(client, id))
    return !subagent.get(id)
  }
  const turn = async (id, busy) => {
    if (reported === busy || !(await topLevel(id))) return
    reported = busy
    await reportTurn(client, busy)
  }
  return {
    event: async ({ event }) => {
      try {
        const id = event?.properties?.sessionID ?? event?.sessionID
        if (!id || !configured()) return
        if (event.type === "session.status") {
          const type = event.properties?.status?.type
          if (type === "busy" || type === "idle") await turn(id, type === "busy")
          return
        }
        if (event.type !== "session.idle") return
        await turn(id, false)
        if (inFlight.has(id)) return
        if (typeof client?.session?.promptAsync !== "function") return
        inFlight.add(id)
        try {
          // Mail is for the agent the user talks to, not for a subagent's session.
          if (!(await topLevel(id))) return
          if ((streak.get(id) ?? 0) >= CONFIG.maxInjections) {
            streak.set(id, 0)
            return
          }
          const mail = await drain(client)
          if (!mail) {
            streak.set(id, 0)
            return
          }
          let handed = false
          try {
            await client.session.promptAsync({
              path: { id },
              body: { parts: [{ type: "text", text: mail.text }] },
            })
            handed = true
          } catch (e) {
            log(client, "warn", `promptAsync failed, mail left queued: ${e}`)
          }
          await mail.confirm(handed)
          if (handed) streak.set(id, (streak.get(id) ?? 0) + 1)
        } finally {
          inFlight.delete(id)
        }
      } catch (e) {
        log(client, "error", `agent-hub plugin: ${e}`)
      }
    },
  }
}
