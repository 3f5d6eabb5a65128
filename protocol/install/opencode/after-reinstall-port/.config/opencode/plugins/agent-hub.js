// Test stand-in for integrations/opencode/agent-hub.js (the real plugin lives at the
// repository root). install copies it and fills in these placeholders.
export const AgentHub = async () => ({
  hub: { command: "/usr/local/bin/agent-hub", as: "worker", tokenFile: "{HOME}/.agent-hub/worker.token", port: 46111 },
});
