//! Agents joining the hub (docs/agents.md, issue 5): the agent CLIs on this machine, described
//! by manifests, observed (`agent-hub agents`, `agents ps`), and wired to the hub by
//! `agent-hub install` / `uninstall`. docs/agents.md is the user's guide.
//!
//! Below the line (no IO): `argv` (closed character sets, `{prompt}`), `manifest` (format,
//! built-ins), `jsonedit` / `tomledit` (lossless config edits), `diff`, `install::plan`,
//! `reload` (what reading the manifests folders again while the hub runs puts in force), and
//! the text parsers in `procs`. Above it: `registry` (the manifests folders), `probe` (PATH,
//! `--version`), `runnable` (which agents take delegated work, and how), `procs::list` (/proc,
//! ps) and `install::apply` (writes). The verbs that report all this (`agent-hub agents`,
//! `install`, `uninstall`) are the client's: `agent_hub_cli::app::agents`.

pub mod argv;
pub mod diff;
pub mod identity;
pub mod install;
pub mod jsonedit;
pub mod manifest;
pub mod on_path;
pub mod probe;
pub mod procs;
pub mod registry;
pub mod reload;
pub mod runnable;
pub mod tomledit;
