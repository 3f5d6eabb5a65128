//! `agent-hub-server`, the hub process: argv → run → exit code. The program, its commands and
//! its exit codes are `agent_hub_server::app` (docs/operations.md).

fn main() -> std::process::ExitCode {
    agent_hub_server::app::main()
}
