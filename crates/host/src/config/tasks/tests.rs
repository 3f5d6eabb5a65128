//! Tests of the `[tasks]` table (`config::tasks`): each key's default, bounds and errors,
//! and the table inside a whole config.

/// The table alone.
mod table {
    use super::super::*;
    use std::os::unix::fs::symlink;

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("agent-hub-tasks-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(std::fs::canonicalize(&p).unwrap())
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn parse(body: &str) -> Result<TasksConfig, ConfigError> {
        let raw: RawTasks = toml::from_str(body).map_err(|e| ConfigError::Toml(e.to_string()))?;
        from_raw(raw)
    }

    fn err(body: &str) -> String {
        parse(body).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let d = Dir::new("defaults");
        let t = parse(&format!("cwd_roots = [{:?}]", d.0)).unwrap();
        assert_eq!(t.max_concurrent, 4);
        assert_eq!(t.queue_max, 64);
        assert_eq!(t.timeout_secs, 1800);
        assert_eq!(t.timeout_ms(), 1_800_000);
        assert_eq!(t.prompt_max_bytes, 262_144);
        assert_eq!(
            t.permission,
            PermissionPolicy::Ask,
            "issue 37: ask by default"
        );
        assert_eq!(t.permission_for("claude"), PermissionPolicy::Ask);
        let a = &t.approvals;
        assert_eq!(a.permission_timeout_secs, 600);
        assert_eq!(a.permission_fallback, PermissionFallback::Reject);
        assert_eq!(a.max_open_requests_per_task, 8);
        assert_eq!(a.max_open_requests, 256);
        assert_eq!(a.max_request_bytes, 8192);
        assert!(a.approvers.is_empty());
        assert_eq!(*a, ApprovalSettings::default());
        let want = Limits {
            max_prompt_bytes: 262_144,
            ..Limits::default()
        };
        assert_eq!(t.limits, want);
        assert_eq!(t.cwd_roots, vec![d.0.clone()]);
        assert!(t.may_mail.is_empty());
        assert_eq!(t.min_progress_secs, 10);
        assert_eq!(t.outcome_text_max_bytes, 65_536);
        assert_eq!(t.history_max, 1000);
        assert_eq!(t.manifests_dir, None);
        assert_eq!(t.headless_stdout_max_bytes, 8 << 20);
    }

    /// `tasks.max_per_delegator` (issue 29): by default every slot and half the queue; at
    /// least 1 and at most the slots and the queue together.
    #[test]
    fn max_per_delegator_defaults_to_the_slots_and_half_the_queue_and_is_bounded() {
        let d = Dir::new("share");
        let roots = format!("cwd_roots = [{:?}]\n", d.0);
        assert_eq!(parse(&roots).unwrap().max_per_delegator, 4 + 32);
        let t = parse(&format!("{roots}max_concurrent = 2\nqueue_max = 0\n")).unwrap();
        assert_eq!(t.max_per_delegator, 2, "no queue: the slots");
        let t = parse(&format!("{roots}max_per_delegator = 68\n")).unwrap();
        assert_eq!(t.max_per_delegator, 68);
        assert_eq!(
            err(&format!("{roots}max_per_delegator = 69\n")),
            "config is invalid: tasks.max_per_delegator = 69 is above its upper bound of 68 (tasks.max_concurrent + tasks.queue_max)"
        );
        assert_eq!(
            err(&format!("{roots}max_per_delegator = 0\n")),
            "config is invalid: tasks.max_per_delegator must be greater than 0"
        );
    }

    #[test]
    fn placement_floors_default_are_read_and_bounded() {
        let d = Dir::new("placement");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let t = parse(&root).unwrap();
        assert_eq!(t.placement, Floors::default());
        assert_eq!(
            (t.placement.min_mem_free_mb, t.placement.min_disk_free_mb),
            (512, 1024)
        );
        let t = parse(&format!(
            "{root}[placement]\nmin_mem_free_mb = 0\nmin_disk_free_mb = 1073741824\nmax_load_per_core = 0"
        ))
        .unwrap();
        assert_eq!(
            t.placement,
            Floors {
                min_mem_free_mb: 0,
                min_disk_free_mb: 1_073_741_824,
                max_load_per_core: 0.0,
            }
        );
        for (line, want) in [
            (
                "min_mem_free_mb = 1048577",
                "tasks.placement.min_mem_free_mb = 1048577 is above its upper bound of 1048576",
            ),
            (
                "min_disk_free_mb = 1073741825",
                "tasks.placement.min_disk_free_mb = 1073741825 is above its upper bound",
            ),
            (
                "max_load_per_core = 0.01",
                "tasks.placement.max_load_per_core = 0.01 must be 0 (no ceiling) or 0.05..=1024",
            ),
            (
                "max_load_per_core = 1025.0",
                "tasks.placement.max_load_per_core = 1025 must be 0 (no ceiling) or 0.05..=1024",
            ),
            ("max_load_per_core = nan", "must be 0 (no ceiling)"),
            ("max_load_per_core = -1.0", "must be 0 (no ceiling)"),
            ("min_mem_free_mb = -1", "min_mem_free_mb"),
            ("spare_gpus = 2", "unknown field"),
        ] {
            let e = err(&format!("{root}[placement]\n{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn the_headless_stdout_cap_is_read_and_bounded() {
        let d = Dir::new("headless");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let t = parse(&format!("{root}headless_stdout_max_bytes = 4096")).unwrap();
        assert_eq!(t.headless_stdout_max_bytes, 4096);
        for (line, want) in [
            (
                "headless_stdout_max_bytes = 1023",
                "tasks.headless_stdout_max_bytes must be at least 1024",
            ),
            (
                "headless_stdout_max_bytes = 268435457",
                "tasks.headless_stdout_max_bytes = 268435457 is above its upper bound of 268435456",
            ),
        ] {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn delegation_keys_are_read_and_bounded() {
        let d = Dir::new("delegation");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let t = parse(&format!(
            "{root}may_mail = [\"critic\", \"scribe\", \"critic\"]\nmin_progress_secs = 1\noutcome_text_max_bytes = 0\nhistory_max = 0\nmanifests_dir = \"/opt/manifests\"\n"
        ))
        .unwrap();
        assert_eq!(t.may_mail, vec!["critic".to_owned(), "scribe".to_owned()]);
        assert_eq!(
            (t.min_progress_secs, t.outcome_text_max_bytes, t.history_max),
            (1, 0, 0)
        );
        assert_eq!(t.manifests_dir, Some(PathBuf::from("/opt/manifests")));
        let cases = [
            ("min_progress_secs = 0", "tasks.min_progress_secs must be greater than 0"),
            ("min_progress_secs = 86401", "tasks.min_progress_secs = 86401 is above its upper bound of 86400 (1 day)"),
            ("outcome_text_max_bytes = 16777217", "tasks.outcome_text_max_bytes = 16777217 is above its upper bound of 16777216 (16 MiB)"),
            ("history_max = 1000001", "tasks.history_max = 1000001 is above its upper bound of 1000000"),
            ("manifests_dir = \"relative\"", "tasks.manifests_dir: relative is not an absolute path"),
            ("may_mail = [\"hub\"]", "tasks.may_mail: \"hub\" is not an agent name a task may mail"),
            ("may_mail = [\"HUB\"]", "is not an agent name a task may mail"),
            ("may_mail = [\"task-0123\"]", "is not an agent name a task may mail"),
            ("may_mail = [\" \"]", "is not an agent name a task may mail"),
            ("may_mail = \"critic\"", "invalid type"),
            ("history_max = -1", "invalid value"),
        ];
        for (line, want) in cases {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
        let many: Vec<String> = (0..=MAX_MAY_MAIL).map(|i| format!("\"a{i}\"")).collect();
        let e = err(&format!("{root}may_mail = [{}]", many.join(",")));
        assert!(
            e.contains("tasks.may_mail lists 257 names; at most 256"),
            "{e}"
        );
    }

    #[test]
    fn every_key_is_read_and_overrides_apply() {
        let d = Dir::new("keys");
        let t = parse(&format!(
            r#"
            max_concurrent = 2
            queue_max = 0
            timeout_secs = 60
            prompt_max_bytes = 1000
            cwd_roots = [{:?}, {:?}]
            permission = "allow"
            agent_permission = {{ codex = "reject" }}
            max_line_bytes = 2048
            max_malformed_lines = 1
            max_text_bytes = 10
            max_agent_requests = 5
            max_log_events = 6
            initialize_timeout_ms = 7
            session_new_timeout_ms = 8
            cancel_grace_ms = 9
            progress_interval_ms = 0
            eof_exit_wait_ms = 11
            stdin_grace_ms = 12
            term_grace_ms = 13
            "#,
            d.0, d.0
        ))
        .unwrap();
        assert_eq!((t.max_concurrent, t.queue_max, t.timeout_secs), (2, 0, 60));
        assert_eq!(t.cwd_roots.len(), 1, "duplicate roots are kept once");
        assert_eq!(t.permission_for("claude"), PermissionPolicy::Allow);
        assert_eq!(t.permission_for("codex"), PermissionPolicy::Reject);
        let l = &t.limits;
        assert_eq!(
            (
                l.max_line_bytes,
                l.max_malformed_lines,
                l.max_text_bytes,
                l.max_prompt_bytes
            ),
            (2048, 1, 10, 1000)
        );
        assert_eq!((l.max_agent_requests, l.max_log_events), (5, 6));
        assert_eq!(
            (
                l.initialize_timeout_ms,
                l.session_new_timeout_ms,
                l.cancel_grace_ms,
                l.progress_interval_ms,
                l.eof_exit_wait_ms,
                l.stdin_grace_ms,
                l.term_grace_ms
            ),
            (7, 8, 9, 0, 11, 12, 13)
        );
    }

    #[test]
    fn bounds_are_checked() {
        let d = Dir::new("bounds");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let cases = [
            (
                "max_concurrent = 0",
                "tasks.max_concurrent must be greater than 0",
            ),
            (
                "max_concurrent = 257",
                "tasks.max_concurrent = 257 is above its upper bound of 256",
            ),
            ("queue_max = 100001", "tasks.queue_max = 100001"),
            (
                "timeout_secs = 0",
                "tasks.timeout_secs must be greater than 0",
            ),
            ("timeout_secs = 604801", "upper bound of 604800 (7 days)"),
            (
                "prompt_max_bytes = 0",
                "tasks.prompt_max_bytes must be greater than 0",
            ),
            (
                "prompt_max_bytes = 16777217",
                "upper bound of 16777216 (16 MiB)",
            ),
            (
                "max_line_bytes = 1023",
                "tasks.max_line_bytes must be at least 1024",
            ),
            (
                "max_line_bytes = 268435457",
                "tasks.max_line_bytes = 268435457",
            ),
            // Past u32: must be refused, not wrapped into range by a cast.
            (
                "max_malformed_lines = 4294967297",
                "tasks.max_malformed_lines = 4294967297",
            ),
            (
                "max_log_events = 4294967296",
                "tasks.max_log_events = 4294967296",
            ),
            (
                "initialize_timeout_ms = 0",
                "tasks.initialize_timeout_ms must be greater than 0",
            ),
            (
                "session_new_timeout_ms = 3600001",
                "upper bound of 3600000 (1 hour)",
            ),
            ("term_grace_ms = 600001", "tasks.term_grace_ms = 600001"),
            ("max_agent_requests = 10000001", "tasks.max_agent_requests"),
            (
                "permission = \"yolo\"",
                "tasks.permission \"yolo\" is not one of ask, reject, allow",
            ),
            // Issue 37 (design §8): every key with its bound, in the key's unit.
            (
                "permission_timeout_secs = 0",
                "tasks.permission_timeout_secs must be greater than 0",
            ),
            (
                "permission_timeout_secs = 86401",
                "tasks.permission_timeout_secs = 86401 is above its upper bound of 86400 (1 day)",
            ),
            (
                "permission_fallback = \"allow\"",
                "tasks.permission_fallback \"allow\" is not one of reject, cancel (there is no allow fallback",
            ),
            (
                "max_open_requests_per_task = 0",
                "tasks.max_open_requests_per_task must be greater than 0",
            ),
            (
                "max_open_requests_per_task = 65",
                "tasks.max_open_requests_per_task = 65 is above its upper bound of 64",
            ),
            (
                "max_open_requests_per_task = 4294967297",
                "tasks.max_open_requests_per_task = 4294967297",
            ),
            (
                "max_open_requests = 0",
                "tasks.max_open_requests must be greater than 0",
            ),
            (
                "max_open_requests = 65537",
                "tasks.max_open_requests = 65537 is above its upper bound of 65536",
            ),
            (
                "max_request_bytes = 1023",
                "tasks.max_request_bytes must be at least 1024 (1 KiB)",
            ),
            (
                "max_request_bytes = 65537",
                "tasks.max_request_bytes = 65537 is above its upper bound of 65536 (64 KiB)",
            ),
            ("approvers = [\"\"]", "tasks.approvers: \"\" is not a roster name"),
            ("approvers = [\"hub\"]", "tasks.approvers: \"hub\""),
            (
                "approvers = [\"task-0123\"]",
                "tasks.approvers: \"task-0123\"",
            ),
            (
                "approvers = [\"a\\u001b]0;x\"]",
                "tasks.approvers: \"a?]0;x\" is not a roster name",
            ),
            (
                "agent_permission = { \"../x\" = \"allow\" }",
                "is not an agent name",
            ),
            (
                "agent_permission = { claude = \"maybe\" }",
                "tasks.agent_permission.claude",
            ),
            ("surprise = 1", "unknown field"),
        ];
        for (line, want) in cases {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    /// Issue 37's keys at their bounds load, and approvers are kept once each, in order.
    #[test]
    fn approval_keys_load_at_their_bounds() {
        let d = Dir::new("approvals");
        let t = parse(&format!(
            r#"cwd_roots = [{:?}]
            permission = "reject"
            permission_timeout_secs = 86400
            permission_fallback = "cancel"
            max_open_requests_per_task = 64
            max_open_requests = 65536
            max_request_bytes = 65536
            approvers = ["ops", "lead", "ops"]
            "#,
            d.0
        ))
        .unwrap();
        assert_eq!(t.permission, PermissionPolicy::Reject);
        let a = &t.approvals;
        assert_eq!(
            (
                a.permission_timeout_secs,
                a.permission_fallback,
                a.max_open_requests_per_task,
                a.max_open_requests,
                a.max_request_bytes
            ),
            (86400, PermissionFallback::Cancel, 64, 65536, 65536)
        );
        assert_eq!(a.approvers, ["ops", "lead"]);
        let low = parse(&format!(
            "cwd_roots = [{:?}]\npermission_timeout_secs = 1\nmax_open_requests_per_task = 1\nmax_open_requests = 1\nmax_request_bytes = 1024\npermission = \"ask\"\n",
            d.0
        ))
        .unwrap();
        assert_eq!(
            (
                low.approvals.permission_timeout_secs,
                low.approvals.max_open_requests_per_task,
                low.approvals.max_open_requests,
                low.approvals.max_request_bytes
            ),
            (1, 1, 1, 1024)
        );
        let many: Vec<String> = (0..=256).map(|i| format!("\"a{i}\"")).collect();
        let e = err(&format!(
            "cwd_roots = [{:?}]\napprovers = [{}]",
            d.0,
            many.join(",")
        ));
        assert!(
            e.contains("tasks.approvers lists 257 names; at most 256"),
            "{e}"
        );
    }

    #[test]
    fn roots_are_checked_at_startup() {
        let d = Dir::new("roots");
        assert!(err("cwd_roots = []").contains("at least one folder"));
        assert!(err("max_concurrent = 1").contains("cwd_roots"));
        assert!(err("cwd_roots = [\"relative/dir\"]").contains("not an absolute path"));
        let missing = d.0.join("missing");
        assert!(err(&format!("cwd_roots = [{missing:?}]")).contains("missing"));
        let file = d.0.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(err(&format!("cwd_roots = [{file:?}]")).contains("not a directory"));
        // A root given through a symlink is kept in its canonical form.
        let real = d.0.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.0.join("link");
        symlink(&real, &link).unwrap();
        let t = parse(&format!("cwd_roots = [{link:?}]")).unwrap();
        assert_eq!(t.cwd_roots, vec![real]);
    }

    #[test]
    fn cwd_checks_refuse_escapes() {
        let d = Dir::new("cwd");
        let root = d.0.join("root");
        let inside = root.join("project");
        std::fs::create_dir_all(&inside).unwrap();
        let outside = d.0.join("outside");
        std::fs::create_dir(&outside).unwrap();
        let sibling = d.0.join("rootling");
        std::fs::create_dir(&sibling).unwrap();
        let roots = vec![root.clone()];

        assert_eq!(check_cwd(&roots, &inside).unwrap(), inside);
        assert_eq!(check_cwd(&roots, &root).unwrap(), root);
        // `..` that stays inside is fine, and the canonical path is what runs.
        let dotdot_in = inside.join("..").join("project");
        assert_eq!(check_cwd(&roots, &dotdot_in).unwrap(), inside);
        // `..` that leaves the root.
        let dotdot_out = root.join("..").join("outside");
        let e = check_cwd(&roots, &dotdot_out).unwrap_err();
        assert!(matches!(e, CwdError::OutsideRoots { .. }), "{e}");
        assert!(e.to_string().contains("resolves to"), "{e}");
        // A symlink inside the root pointing out of it.
        let escape = inside.join("escape");
        symlink(&outside, &escape).unwrap();
        let e = check_cwd(&roots, &escape).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("resolves to {}", outside.display())),
            "{e}"
        );
        // A symlink under the root into the root is fine.
        let back = outside.join("back");
        symlink(&inside, &back).unwrap();
        assert_eq!(check_cwd(&roots, &back).unwrap(), inside);
        // A name that merely starts like the root is not under it.
        assert!(matches!(
            check_cwd(&roots, &sibling),
            Err(CwdError::OutsideRoots { .. })
        ));
        // Missing, relative, a file, a dangling link.
        assert!(matches!(
            check_cwd(&roots, &root.join("nope")),
            Err(CwdError::Unresolvable(..))
        ));
        assert!(matches!(
            check_cwd(&roots, Path::new("root/project")),
            Err(CwdError::NotAbsolute(_))
        ));
        let file = inside.join("file.txt");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            check_cwd(&roots, &file),
            Err(CwdError::NotADirectory(_))
        ));
        let dangling = inside.join("dangling");
        symlink(d.0.join("gone"), &dangling).unwrap();
        assert!(matches!(
            check_cwd(&roots, &dangling),
            Err(CwdError::Unresolvable(..))
        ));
    }
}

/// The table inside a whole config.
mod whole_config {
    use crate::config::Config;
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../../../../config.example.toml");

    #[test]
    fn a_peer_may_delegate_only_to_a_hub_with_tasks_and_statuses_are_bounded() {
        let base = Path::new("/etc/agent-hub");
        let relay = "\n[relay]\npeer_id = \"me\"\nlisten = \"127.0.0.2:46111\"\nheartbeat_interval_ms = 30000\nhandshake_timeout_ms = 10000\nreconnect_backoff_ms = [10000]\nfeatures = [\"unknown-ok\"]\nstatus_path = \"s.json\"\n\n[[relay.peers]]\nid = \"lab\"\nkey_file = \"k\"\nallow_claudectl = true\ndelegate = true\n";
        let e = Config::parse(&format!("{EXAMPLE}{relay}"), base).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"lab\" sets delegate = true, but there is no [tasks] table"),
            "{e}"
        );
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let tasks =
            |extra: &str| format!("{EXAMPLE}{relay}\n[tasks]\ncwd_roots = [{tmp:?}]\n{extra}");
        let c = Config::parse(&tasks(""), base).unwrap();
        assert!(c.relay.unwrap().peers[0].delegate);
        assert_eq!(
            c.tasks.unwrap().peer_status_secs,
            super::super::DEFAULT_PEER_STATUS_SECS
        );
        assert_eq!(
            Config::parse(&tasks("peer_status_secs = 1\n"), base)
                .unwrap()
                .tasks
                .unwrap()
                .peer_status_secs,
            1
        );
        for bad in ["peer_status_secs = 0\n", "peer_status_secs = 3601\n"] {
            let e = Config::parse(&tasks(bad), base).unwrap_err();
            assert!(e.to_string().contains("tasks.peer_status_secs"), "{e}");
        }
    }

    #[test]
    fn the_table_is_optional_and_hooks_into_the_config() {
        let base = Path::new("/etc/agent-hub");
        assert_eq!(Config::parse(EXAMPLE, base).unwrap().tasks, None);
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let text = format!("{EXAMPLE}\n[tasks]\ncwd_roots = [{tmp:?}]\nmax_concurrent = 2\n");
        let t = Config::parse(&text, base).unwrap().tasks.unwrap();
        assert_eq!(t.max_concurrent, 2);
        assert_eq!(t.cwd_roots, vec![tmp]);
        let bad = format!("{EXAMPLE}\n[tasks]\ncwd_roots = [\"/\"]\nqueue_max = -1\n");
        assert!(Config::parse(&bad, base).is_err());
    }

    #[test]
    fn the_examples_commented_table_uncommented_is_valid_and_says_the_defaults() {
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let table: String = EXAMPLE
            .lines()
            .skip_while(|l| !l.starts_with("# [tasks]"))
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .replace("/home/me/src", tmp.to_str().unwrap());
        assert!(table.starts_with("[tasks]\n"), "{table}");
        let c = Config::parse(&format!("{EXAMPLE}\n{table}"), Path::new("/d")).unwrap();
        let t = c.tasks.unwrap();
        assert_eq!(
            (t.max_concurrent, t.queue_max, t.timeout_secs),
            (4, 64, 1800)
        );
        assert_eq!(t.max_per_delegator, 36);
        assert_eq!(
            t.prompt_max_bytes,
            super::super::DEFAULT_PROMPT_MAX_BYTES as usize
        );
        assert_eq!(
            (t.min_progress_secs, t.outcome_text_max_bytes, t.history_max),
            (10, 65_536, 1000)
        );
        assert!(t.may_mail.is_empty());
        assert_eq!(
            t.permission_for("claude"),
            agent_hub_proto::acp::PermissionPolicy::Allow
        );
        assert_eq!(
            t.permission_for("codex"),
            agent_hub_proto::acp::PermissionPolicy::Ask
        );
        // The approval keys as the example writes them are the defaults.
        assert_eq!(
            t.approvals,
            agent_hub_proto::tasks::settings::ApprovalSettings::default()
        );
    }
}
