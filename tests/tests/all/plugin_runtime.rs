//! The plugin runtime against real components: hostile ones that must end
//! in their typed error within their limit (with the host still serving the
//! next call), capability admission, the deny-all WASI context, an older
//! WIT minor version, and every first-party world.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bl_e2e::{component_bytes, plugin_dir, test_plugin_dir};
use bl_plugins::{
    AllocatorChoice, Approval, Capability, ContractRegistry, ContractRequest, GateOutcome, Grants,
    InputArtifact, Limits, LoadOptions, OutputDeclaration, PluginError, PublishRequest, Runtime,
    RuntimeConfig, Visibility, judge_all, transform_seed,
};

/// A built component, first-party or fixture, by name.
fn bytes(name: &str) -> Vec<u8> {
    let first_party = plugin_dir().join(format!("{name}.wasm"));
    let dir = if first_party.is_file() {
        plugin_dir()
    } else {
        test_plugin_dir()
    };
    component_bytes(&dir, name)
}

fn runtime_with(limits: Limits, allocator: AllocatorChoice) -> Runtime {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(bl_e2e::repo_root().join("target/test-component-cache")),
        limits,
        allocator,
        command_runner: Some(Arc::new(bl_sandbox::Subprocess)),
    })
    .unwrap()
}

fn runtime() -> Runtime {
    runtime_with(
        Limits {
            deadline: Duration::from_millis(500),
            memory_bytes: 64 << 20,
            ..Limits::default()
        },
        AllocatorChoice::Auto,
    )
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker.txt"), "hello").unwrap();
    dir
}

fn hostile(rt: &Runtime, mode: &str, ws: &Path) -> Result<String, PluginError> {
    let gate = rt
        .load_gate("hostile", &bytes("hostile"), &LoadOptions::default())
        .unwrap();
    rt.check(&gate, ws, &format!(r#"{{"mode": "{mode}"}}"#))
        .map(|i| i.value.summary)
}

/// After every hostile call the same runtime must still serve a good one.
fn still_serves(rt: &Runtime, ws: &Path) {
    assert_eq!(hostile(rt, "pass", ws).unwrap(), "behaved");
}

#[test]
fn an_infinite_loop_times_out_within_the_deadline_plus_100ms() {
    let rt = runtime();
    let ws = workspace();
    // The quickest of three calls: on a loaded 2-core machine one call can
    // lose its core for a moment; a deadline not kept loses every time.
    let mut took = Duration::MAX;
    let mut err = None;
    for _ in 0..3 {
        let started = Instant::now();
        let e = hostile(&rt, "loop", ws.path()).unwrap_err();
        took = took.min(started.elapsed());
        err = Some(e);
    }
    let err = err.unwrap();
    assert!(
        matches!(err, PluginError::Timeout { ref plugin, deadline } if plugin == "hostile" && deadline == Duration::from_millis(500)),
        "{err}"
    );
    assert!(took < Duration::from_millis(600), "took {took:?}");
    assert!(err.to_string().contains("deadline of 500ms"), "{err}");
    still_serves(&rt, ws.path());
}

#[test]
fn growing_memory_past_the_limit_is_a_memory_error() {
    let rt = runtime();
    let ws = workspace();
    let err = hostile(&rt, "memory", ws.path()).unwrap_err();
    assert!(
        matches!(err, PluginError::MemoryLimit { limit_bytes, .. } if limit_bytes == 64 << 20),
        "{err}"
    );
    still_serves(&rt, ws.path());
}

#[test]
fn huge_output_is_an_output_limit_error() {
    let rt = runtime_with(
        Limits {
            memory_bytes: 256 << 20,
            ..Limits::default()
        },
        AllocatorChoice::Auto,
    );
    let ws = workspace();
    let err = hostile(&rt, "output", ws.path()).unwrap_err();
    assert!(
        matches!(err, PluginError::OutputLimit { ref what, limit_bytes, .. } if what == "its verdict" && limit_bytes == 1 << 20),
        "{err}"
    );
    still_serves(&rt, ws.path());
}

#[test]
fn a_panic_is_a_trap() {
    let rt = runtime();
    let ws = workspace();
    let err = hostile(&rt, "panic", ws.path()).unwrap_err();
    assert!(
        matches!(err, PluginError::Trap { ref plugin, .. } if plugin == "hostile"),
        "{err}"
    );
    still_serves(&rt, ws.path());
}

#[test]
fn every_escape_is_refused_and_fails_the_call_even_when_the_gate_claims_a_pass() {
    let rt = runtime();
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(outer.path().join("outside.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outer.path(), ws.join("link")).unwrap();
    std::os::unix::fs::symlink(outer.path().join("outside.txt"), ws.join("filelink")).unwrap();
    for (mode, path) in [
        ("escape-dotdot", "../outside.txt"),
        ("escape-absolute", "/etc/passwd"),
        ("escape-symlink", "link/outside.txt"),
    ] {
        let err = hostile(&rt, mode, &ws).unwrap_err();
        assert!(
            matches!(err, PluginError::Escape { path: ref p, .. } if p == path),
            "{mode}: {err}"
        );
        let outcome = bl_plugins::outcome(Err(err));
        assert!(matches!(outcome, GateOutcome::Error(_)), "{mode}");
    }
    still_serves(&rt, &ws);
}

#[test]
fn an_ungranted_capability_fails_at_load_naming_it_and_a_granted_one_works() {
    let rt = runtime();
    let bytes = bytes("wants-command");
    let err = rt
        .load_gate("wants-command", &bytes, &LoadOptions::default())
        .err()
        .expect("loading without grants must fail");
    assert!(matches!(err, PluginError::Load { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("`command` capability, which was not granted"),
        "{err}"
    );

    // Granting only `command` still leaves `log` ungranted.
    let only_command = LoadOptions {
        declared: None,
        grants: Grants::of([Capability::Command]),
        ..Default::default()
    };
    let err = rt
        .load_gate("wants-command", &bytes, &only_command)
        .err()
        .unwrap();
    assert!(err.to_string().contains("`log` capability"), "{err}");

    // The manifest must request what the component imports.
    let lying = LoadOptions {
        declared: Some(&[Capability::Log]),
        grants: Grants::of([Capability::Command, Capability::Log]),
        ..Default::default()
    };
    let err = rt.load_gate("wants-command", &bytes, &lying).err().unwrap();
    assert!(
        err.to_string().contains("manifest does not request it"),
        "{err}"
    );

    let granted = LoadOptions {
        declared: None,
        grants: Grants::of([Capability::Command, Capability::Log]),
        ..Default::default()
    };
    let gate = rt.load_gate("wants-command", &bytes, &granted).unwrap();
    let ws = workspace();
    let invocation = rt.check(&gate, ws.path(), "{}").unwrap();
    let summary = invocation.value.summary;
    assert!(summary.starts_with("hello"), "{summary}");
    // The command saw a scrubbed environment with a private HOME.
    assert!(
        summary.contains("PATH=/usr/local/bin:/usr/bin:/bin"),
        "{summary}"
    );
    assert!(
        summary.contains("HOME=/") && !summary.contains("CARGO"),
        "{summary}"
    );
    assert_eq!(invocation.log.len(), 1);
    assert_eq!(invocation.log[0].message, "ran");
}

#[test]
fn wasi_imports_load_against_a_deny_all_context() {
    let rt = runtime();
    let ws = workspace();
    let bytes = bytes("wasi-gate");
    let gate = rt
        .load_gate("wasi-gate", &bytes, &LoadOptions::default())
        .unwrap();
    let summary = rt.check(&gate, ws.path(), "{}").unwrap().value.summary;
    assert_eq!(summary, "clock=0 random=0,0 env=0");

    let granted = LoadOptions {
        declared: None,
        grants: Grants::of([Capability::Clock, Capability::Random]),
        ..Default::default()
    };
    let gate = rt.load_gate("wasi-gate", &bytes, &granted).unwrap();
    let summary = rt.check(&gate, ws.path(), "{}").unwrap().value.summary;
    assert!(
        !summary.starts_with("clock=0 "),
        "a granted clock is real: {summary}"
    );
    assert!(
        !summary.contains("random=0,0"),
        "granted randomness is real: {summary}"
    );
    assert!(
        summary.ends_with("env=0"),
        "the environment is never granted: {summary}"
    );
}

#[test]
fn a_component_built_for_an_older_wit_minor_version_keeps_loading() {
    let rt = runtime();
    let ws = workspace();
    let bytes = bytes("legacy-gate");
    let summary = bl_pluginbuild::summarize(&bytes).unwrap();
    assert_eq!(summary.wit_package.as_deref(), Some("bl:plugin@1.0.0"));
    assert_ne!(bl_plugins::WIT_PACKAGE, "bl:plugin@1.0.0");
    let gate = rt
        .load_gate("legacy-gate", &bytes, &LoadOptions::default())
        .unwrap();
    assert!(rt.check(&gate, ws.path(), "{}").unwrap().value.passed);
}

#[test]
fn pooling_and_on_demand_allocators_both_run_and_fuel_stops_a_loop() {
    let ws = workspace();
    for choice in [AllocatorChoice::Pooling, AllocatorChoice::OnDemand] {
        let rt = runtime_with(Limits::default(), choice);
        assert_eq!(
            rt.allocator(),
            if choice == AllocatorChoice::Pooling {
                "pooling"
            } else {
                "on-demand"
            }
        );
        still_serves(&rt, ws.path());
    }
    let rt = runtime_with(
        Limits {
            fuel: Some(5_000_000),
            deadline: Duration::from_secs(30),
            ..Limits::default()
        },
        AllocatorChoice::Auto,
    );
    let err = hostile(&rt, "loop", ws.path()).unwrap_err();
    assert!(
        matches!(
            err,
            PluginError::FuelExhausted {
                fuel: 5_000_000,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn bad_config_is_a_typed_error_never_a_verdict() {
    let rt = runtime();
    let ws = workspace();
    let gate = rt
        .load_gate("files", &bytes("files"), &LoadOptions::default())
        .unwrap();
    let err = rt
        .check(&gate, ws.path(), r#"{"required": 7}"#)
        .unwrap_err();
    assert!(
        matches!(err, PluginError::BadConfig { ref plugin, .. } if plugin == "files"),
        "{err}"
    );
}

#[test]
fn the_composite_gate_passes_only_when_all_pass_and_errs_when_one_errs() {
    let rt = runtime();
    let ws = workspace();
    let files = rt
        .load_gate("files", &bytes("files"), &LoadOptions::default())
        .unwrap();
    let hostile_gate = rt
        .load_gate("hostile", &bytes("hostile"), &LoadOptions::default())
        .unwrap();
    let ok = r#"{"required": ["marker.txt"]}"#;
    let missing = r#"{"required": ["nope.txt"]}"#;
    assert!(matches!(
        judge_all(
            &rt,
            &[(&files, ok), (&hostile_gate, r#"{"mode":"pass"}"#)],
            ws.path()
        ),
        GateOutcome::Passed(_)
    ));
    match judge_all(&rt, &[(&files, ok), (&files, missing)], ws.path()) {
        GateOutcome::Failed(v) => assert!(
            v.summary.starts_with("1 of 2 gates failed"),
            "{}",
            v.summary
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        judge_all(
            &rt,
            &[(&files, missing), (&hostile_gate, r#"{"mode":"panic"}"#)],
            ws.path()
        ),
        GateOutcome::Error(_)
    ));
}

#[test]
fn first_party_gates_run_real_commands_and_schemas() {
    let rt = runtime_with(
        Limits {
            deadline: Duration::from_secs(60),
            ..Limits::default()
        },
        AllocatorChoice::Auto,
    );
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("test_ok.py"),
        "def test_ok():\n    assert 1 + 1 == 2\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("data.json"), r#"{"n": "x"}"#).unwrap();
    let grant = LoadOptions {
        declared: None,
        grants: Grants::of([Capability::Command]),
        ..Default::default()
    };

    let command = rt.load_gate("command", &bytes("command"), &grant).unwrap();
    let v = rt
        .check(
            &command,
            ws.path(),
            r#"{"argv": ["sh", "-c", "ls; exit 4"]}"#,
        )
        .unwrap()
        .value;
    assert!(!v.passed && v.summary.contains("exited 4"), "{v:?}");
    assert!(v.findings.iter().any(|f| f.message.contains("test_ok.py")));

    let pytest = rt.load_gate("pytest", &bytes("pytest"), &grant).unwrap();
    let v = rt
        .check(&pytest, ws.path(), r#"{"python": "/usr/bin/python3"}"#)
        .unwrap()
        .value;
    assert!(v.passed, "{v:?}");
    std::fs::write(
        ws.path().join("test_broken.py"),
        "import not_a_module_anywhere\n",
    )
    .unwrap();
    let v = rt
        .check(&pytest, ws.path(), r#"{"python": "/usr/bin/python3"}"#)
        .unwrap()
        .value;
    assert!(!v.passed && v.summary.contains("collection"), "{v:?}");

    let schema = rt
        .load_gate("jsonschema", &bytes("jsonschema"), &LoadOptions::default())
        .unwrap();
    let config = r#"{"schema": {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"n": {"type": "integer"}}}, "files": ["data.json"]}"#;
    let v = rt.check(&schema, ws.path(), config).unwrap().value;
    assert!(!v.passed);
    assert!(
        v.findings[0].message.starts_with("data.json#/n:"),
        "{:?}",
        v.findings
    );
}

#[test]
fn contracts_dispatch_by_basename_and_report_in_the_seed_shape() {
    let rt = runtime();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("implementer-summary.json"),
        r#"{"files_changed": []}"#,
    )
    .unwrap();
    std::fs::write(ws.path().join("plan.json"), r#"{"steps": [{"do": "x"}]}"#).unwrap();
    std::fs::write(ws.path().join("notes.txt"), "anything").unwrap();
    let bytes = bytes("contracts");
    let manifest: bl_pluginbuild::PluginManifest =
        serde_json::from_slice(&std::fs::read(plugin_dir().join("contracts.plugin.json")).unwrap())
            .unwrap();
    let mut registry = ContractRegistry::new();
    for pattern in &manifest.contract_patterns {
        let plugin = rt
            .load_contract("contracts", &bytes, &LoadOptions::default())
            .unwrap();
        registry.register(pattern, plugin, "{}").unwrap();
    }
    let ask = |artifact: &str| {
        registry
            .check(
                &rt,
                ws.path(),
                &ContractRequest {
                    artifact: artifact.into(),
                    dispatch_started_ms: 0,
                },
            )
            .unwrap()
    };
    let report = ask("implementer-summary.json");
    assert_eq!(
        report.contracts.get("implementer-summary.json"),
        Some(&"fail")
    );
    assert_eq!(
        report.failure.as_deref(),
        Some(
            "implementer-summary.json: implementer-summary.json contract: files_changed/touched_files is empty"
        )
    );
    assert_eq!(ask("plan.json").contracts.get("plan.json"), Some(&"pass"));
    let unknown = ask("notes.txt");
    assert!(unknown.contracts.is_empty() && unknown.failure.is_none());
}

fn reports() -> Vec<InputArtifact> {
    ["security", "perf", "style", "docs"]
        .iter()
        .map(|id| InputArtifact {
            name: format!("reports/lens-{id}.md"),
            media_type: "text/markdown".into(),
            bytes: format!(
                "Lens: {id}\nThe {id} lens says: look at lens-{id}.md and fix things.\n"
            )
            .into_bytes(),
        })
        .collect()
}

fn panel_outputs(label_visibility: Visibility) -> Vec<OutputDeclaration> {
    vec![
        OutputDeclaration {
            name: "panel-responses.md".into(),
            media_type: "text/markdown".into(),
            visibility: Visibility::Consumer,
        },
        OutputDeclaration {
            name: "panel-label-map.json".into(),
            media_type: "application/json".into(),
            visibility: label_visibility,
        },
    ]
}

#[test]
fn panel_anonymize_is_deterministic_and_keeps_the_label_map_system_only() {
    let rt = runtime();
    let plugin = rt
        .load_transform(
            "panel-anonymize",
            &bytes("panel-anonymize"),
            &LoadOptions::default(),
        )
        .unwrap();
    let seed = transform_seed("run-1", &reports());
    let first = rt
        .transform(
            &plugin,
            reports(),
            panel_outputs(Visibility::SystemOnly),
            &seed,
            "{}",
        )
        .unwrap()
        .value;
    let again = rt
        .transform(
            &plugin,
            reports(),
            panel_outputs(Visibility::SystemOnly),
            &seed,
            "{}",
        )
        .unwrap()
        .value;
    assert_eq!(
        first, again,
        "the same inputs must give byte-identical outputs"
    );
    assert_eq!(first.outputs[1].visibility, Visibility::SystemOnly);
    let bundle = String::from_utf8(first.outputs[0].bytes.clone()).unwrap();
    for id in ["security", "perf", "style", "docs"] {
        assert!(!bundle.contains(&format!("lens-{id}")), "{bundle}");
        assert!(!bundle.contains(&format!("{id} lens")), "{bundle}");
    }
    assert!(bundle.contains("## Response D"));
    // Another run id is another seed, and the order may change; the seed
    // never depends on anything but the run id and the input digests.
    assert_eq!(
        seed,
        transform_seed("run-1", &reports().into_iter().rev().collect::<Vec<_>>())
    );
    assert_ne!(seed, transform_seed("run-2", &reports()));

    let err = rt
        .transform(
            &plugin,
            reports(),
            panel_outputs(Visibility::Consumer),
            &seed,
            "{}",
        )
        .unwrap_err();
    assert!(matches!(err, PluginError::BadConfig { .. }), "{err}");
}

#[test]
fn a_transform_that_skips_a_declared_output_fails() {
    let rt = runtime();
    let plugin = rt
        .load_transform(
            "panel-anonymize",
            &bytes("panel-anonymize"),
            &LoadOptions::default(),
        )
        .unwrap();
    let mut outputs = panel_outputs(Visibility::SystemOnly);
    outputs.push(OutputDeclaration {
        name: "extra.md".into(),
        media_type: "text/markdown".into(),
        visibility: Visibility::Consumer,
    });
    let err = rt
        .transform(&plugin, reports(), outputs, b"seed", "{}")
        .unwrap_err();
    assert!(
        matches!(err, PluginError::MissingOutput { ref output, .. } if output == "extra.md"),
        "{err}"
    );
}

#[test]
fn publication_policies_decide_on_approvals_and_targets() {
    let rt = runtime();
    let outbox = rt
        .load_policy(
            "outbox-policy",
            &bytes("outbox-policy"),
            &LoadOptions::default(),
        )
        .unwrap();
    let deny = rt
        .load_policy("deny-all", &bytes("deny-all"), &LoadOptions::default())
        .unwrap();
    let config = r#"{"outbox": "outbox", "required_approvals": ["release"]}"#;
    let request = |target: &str, approvals: Vec<Approval>| PublishRequest {
        effect_key: "publish-report".into(),
        kind: "local-outbox".into(),
        target: target.into(),
        payload_digest: "sha256:00".into(),
        approvals,
    };
    let approved = vec![Approval {
        name: "release".into(),
        approver: "ana".into(),
        approved: true,
    }];
    assert!(
        rt.decide(
            &outbox,
            &request("outbox/report.md", approved.clone()),
            config
        )
        .unwrap()
        .value
        .allow
    );
    assert!(
        !rt.decide(&outbox, &request("outbox/report.md", vec![]), config)
            .unwrap()
            .value
            .allow
    );
    assert!(
        !rt.decide(&outbox, &request("../report.md", approved.clone()), config)
            .unwrap()
            .value
            .allow
    );
    assert!(
        !rt.decide(&deny, &request("outbox/report.md", approved), "{}")
            .unwrap()
            .value
            .allow
    );
    // A transform is not a policy: the world is checked at load.
    let err = rt
        .load_policy(
            "panel-anonymize",
            &bytes("panel-anonymize"),
            &LoadOptions::default(),
        )
        .err()
        .unwrap();
    assert!(
        matches!(err, PluginError::Load { .. }) && err.to_string().contains("publication-policy"),
        "{err}"
    );
}

#[test]
fn outputs_past_the_cap_end_the_transform_with_an_output_limit_error() {
    let rt = runtime_with(
        Limits {
            max_artifact_bytes: 64,
            ..Limits::default()
        },
        AllocatorChoice::Auto,
    );
    let plugin = rt
        .load_transform(
            "panel-anonymize",
            &bytes("panel-anonymize"),
            &LoadOptions::default(),
        )
        .unwrap();
    let err = rt
        .transform(
            &plugin,
            reports(),
            panel_outputs(Visibility::SystemOnly),
            b"seed",
            "{}",
        )
        .unwrap_err();
    assert!(
        matches!(err, PluginError::OutputLimit { ref what, limit_bytes: 64, .. } if what == "its outputs"),
        "{err}"
    );
}

/// A guest that ignores a refused `memory.grow` (-1) and claims a pass is
/// trapped at the grow: the refusal is final.
#[test]
fn a_refused_memory_grow_traps_even_when_the_guest_would_carry_on() {
    let rt = runtime();
    let ws = workspace();
    let err = hostile(&rt, "grow-and-carry-on", ws.path()).unwrap_err();
    assert!(
        matches!(err, PluginError::MemoryLimit { limit_bytes, .. } if limit_bytes == 64 << 20),
        "{err}"
    );
    still_serves(&rt, ws.path());
}

/// A FIFO in the workspace (with no writer) is kind `other`: reading it
/// is refused at once, never opened, and the call returns well within its
/// deadline.
#[test]
fn a_fifo_in_the_workspace_is_never_opened() {
    let rt = runtime();
    let ws = workspace();
    nix::unistd::mkfifo(&ws.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let summary = hostile(&rt, "read-fifo", ws.path()).unwrap();
    assert!(summary.contains("not a file of the kind"), "{summary}");
}

/// A command that runs into the call's deadline ends the call as a
/// timeout: the guest never resumes to turn it into a verdict.
#[test]
fn a_deadline_that_passes_during_a_host_call_never_resumes_the_guest() {
    let rt = runtime();
    let granted = LoadOptions {
        declared: None,
        grants: Grants::of([Capability::Command, Capability::Log]),
        ..Default::default()
    };
    let gate = rt
        .load_gate("wants-command", &bytes("wants-command"), &granted)
        .unwrap();
    let ws = workspace();
    let err = rt
        .check(&gate, ws.path(), r#"{"argv": ["sleep", "5"]}"#)
        .unwrap_err();
    assert!(
        matches!(err, PluginError::Timeout { deadline, .. } if deadline == Duration::from_millis(500)),
        "{err}"
    );
}

/// One host serves every use: plugins found by name on its search path,
/// each load with its own deadline, all on the one engine it made once.
#[test]
fn one_plugin_host_loads_each_plugin_with_its_own_deadline() {
    let dir = if plugin_dir().join("hostile.wasm").is_file() {
        plugin_dir()
    } else {
        test_plugin_dir()
    };
    let host = bl_plugins::PluginHost::new(
        RuntimeConfig {
            cache_dir: Some(bl_e2e::repo_root().join("target/test-component-cache")),
            ..Default::default()
        },
        vec![dir.clone()],
    );
    let ws = workspace();
    let found = host.find("hostile").unwrap();
    assert_eq!(found.path, dir.join("hostile.wasm"));
    let engine = host.runtime().unwrap() as *const Runtime;
    let call = |deadline: Option<Duration>| {
        let grant = bl_plugins::Grant {
            deadline,
            ..Default::default()
        };
        let gate = host.load_gate(&found, &grant).unwrap();
        host.runtime()
            .unwrap()
            .check(&gate, ws.path(), r#"{"mode": "loop"}"#)
            .unwrap_err()
    };
    let short = call(Some(Duration::from_millis(200)));
    assert!(
        matches!(short, PluginError::Timeout { deadline, .. } if deadline == Duration::from_millis(200)),
        "{short}"
    );
    let longer = call(Some(Duration::from_millis(400)));
    assert!(
        matches!(longer, PluginError::Timeout { deadline, .. } if deadline == Duration::from_millis(400)),
        "{longer}"
    );
    assert!(
        std::ptr::eq(engine, host.runtime().unwrap()),
        "the host made its engine once"
    );
    let missing = host.find("no-such-plugin").err().unwrap().to_string();
    assert!(
        missing.contains("no-such-plugin") && missing.contains(&dir.display().to_string()),
        "{missing}"
    );
}
