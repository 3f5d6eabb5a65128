// Test stand-in for integrations/opencode/agent-hub.js (the real plugin lives at the
// repository root). install copies it and fills in these placeholders.
export const AgentHub = async () => ({
  hub: { command: "@AGENT_HUB_COMMAND@", as: "@AGENT_HUB_AS@", tokenFile: "@AGENT_HUB_TOKEN_FILE@", port: @AGENT_HUB_PORT@ },
});
