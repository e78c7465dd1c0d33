//! `bl egress check` through the real binary: exit 0 allow, 1 deny, with the
//! class of each address. Only literal addresses and reserved names are
//! used, so no test needs outside DNS.

use bl_store::RunDir;
use std::process::Command;

use bl_e2e::bl_binary;
use serde_json::Value;

fn check(url: &str) -> (i32, Value) {
    let out = Command::new(bl_binary())
        .args(["egress", "check", url, "--json"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn allows_public_unicast_and_denies_every_disguise_of_an_internal_address() {
    let (code, report) = check("https://8.8.8.8/dns-query");
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["addresses"][0]["class"], "public");
    for (url, class) in [
        ("http://0x7f.1/", "loopback"),
        ("http://2852039166/", "link_local"),
        ("http://[::ffff:10.0.0.1]/", "embeds_ipv4(private)"),
        ("http://[fd00::1]/", "unique_local"),
    ] {
        let (code, report) = check(url);
        assert_eq!(code, 1, "{url}: {report}");
        assert_eq!(report["addresses"][0]["class"], class, "{url}");
    }
    for url in [
        "http://metadata.internal/",
        "ftp://8.8.8.8/",
        "https://u:p@8.8.8.8/",
        "http://no-such-host.invalid/",
    ] {
        let (code, report) = check(url);
        assert_eq!(code, 1, "{url}: {report}");
        assert!(report["denial"].is_string());
    }
}

/// `bl graph init` writes the file bounded-loops writes for the same
/// flags (byte for byte), private, atomically, never through a symlink.
#[test]
fn graph_init_writes_the_posture_config_privately() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let init = |args: &[&str]| {
        let out = Command::new(bl_binary())
            .args(["graph", "init"])
            .args(args)
            .env("HOME", dir.path())
            .env_remove("BOUNDED_LOOPS_EGRESS_CONFIG")
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = init(&[
        "--posture",
        "allowlist",
        "--allowlist",
        "api.anthropic.com,api.openai.com:443",
        "--allowlist",
        "Example.org:8443",
    ]);
    assert_eq!(code, 0, "{err}");
    let path = dir.path().join(".bounded-loops/egress.json");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\n  \"allowlist\": [\n    \"api.anthropic.com\",\n    \"api.openai.com\",\n    \"example.org:8443\"\n  ],\n  \"posture\": \"allowlist\"\n}\n"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let (code, err) = init(&["--posture", "open"]);
    assert_eq!(code, 2);
    assert!(err.contains("pass --yes"), "{err}");
    let (code, err) = init(&["--posture", "open", "--allowlist", "a.com", "--yes"]);
    assert_eq!(code, 2);
    assert!(err.contains("only apply with --posture allowlist"), "{err}");
    let (code, _) = init(&["--posture", "open", "--yes"]);
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\n  \"posture\": \"open\"\n}\n"
    );

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let (code, err) = init(&[
        "--posture",
        "broker",
        "--yes",
        "--config",
        link.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("symlink"), "{err}");
    assert!(std::fs::read_to_string(&path).unwrap().contains("open"));
}

/// `bl egress send` in production: records are checked as bounded-loops
/// checks them, loopback and private endpoints and plain http are refused
/// before anything connects, and the credential never appears in output.
#[test]
fn egress_send_refuses_before_connecting_and_never_prints_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let record = |host: &str, scheme: &str| {
        serde_json::json!({"c1": {
            "allowed_effect": "read_only", "connection_id": "c1",
            "credential_env_var_name": "BL_TEST_SEND_KEY", "endpoint_host": host,
            "endpoint_path": "/v1/chat", "endpoint_scheme": scheme,
            "expires_at": "2099-01-01T00:00:00Z", "request_style": "openai_chat",
            "route_policy": {"policy_digest": "d", "data_class_max": "public",
                "allowed_providers": ["p"], "allowed_models": ["m"], "allowed_regions": ["r"]}
        }})
    };
    let send = |admitted: &serde_json::Value| {
        let path = dir.path().join("admitted.json");
        std::fs::write(&path, admitted.to_string()).unwrap();
        let out = Command::new(bl_binary())
            .args(["egress", "send", "--connection", "c1", "--admitted"])
            .arg(&path)
            .env("BL_TEST_SEND_KEY", "sk-live-do-not-print")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("sk-live-do-not-print"), "{text}");
        (out.status.code().unwrap(), text)
    };
    for (host, scheme, expected) in [
        ("127.0.0.1:8080", "https", "loopback"),
        ("10.1.2.3", "https", "private"),
        ("169.254.169.254", "https", "link_local"),
        ("api.example.com", "http", "only ever sent over https"),
        ("metadata.internal", "https", "internal network"),
    ] {
        let (code, text) = send(&record(host, scheme));
        assert_eq!(code, 2, "{host}: {text}");
        assert!(text.contains(expected), "{host}: {text}");
        assert!(
            text.contains("BL_EGRESS {\"kind\":\"lease.issued\""),
            "{text}"
        );
        assert!(text.contains("\"kind\":\"egress.denied\""), "{text}");
    }
    let mut bad = record("api.example.com", "https");
    bad["c1"]["credential_env_var_name"] = serde_json::json!("sk-abc");
    let (code, text) = send(&bad);
    assert_eq!(code, 2);
    assert!(
        text.contains("error: egress send: invalid --admitted record \u{2014} [secret_value] /admitted_connection/credential_env_var_name"),
        "{text}"
    );
    let (code, text) = send(&serde_json::json!([]));
    assert_eq!(code, 2);
    assert!(text.contains("--admitted must be a JSON object"), "{text}");
}

/// With `--run-dir`, every broker decision lands in the run's
/// `egress-events.jsonl` (the run's identity, hash-chained), which
/// `bl verify` checks with the rest of the run.
#[test]
fn egress_send_records_its_decisions_in_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    bl_e2e::copy_tree(
        &bl_e2e::repo_root().join("tests/corpus/runs/upstream-demo"),
        &run,
    );
    let admitted = dir.path().join("admitted.json");
    std::fs::write(
        &admitted,
        serde_json::json!({"c1": {
            "allowed_effect": "read_only", "connection_id": "c1",
            "credential_env_var_name": "BL_TEST_SEND_KEY", "endpoint_host": "10.9.8.7",
            "endpoint_path": "/v1/chat", "endpoint_scheme": "https",
            "expires_at": "2099-01-01T00:00:00Z", "request_style": "openai_chat",
            "route_policy": {"policy_digest": "d", "data_class_max": "public",
                "allowed_providers": ["p"], "allowed_models": ["m"], "allowed_regions": ["r"]}
        }})
        .to_string(),
    )
    .unwrap();
    for _ in 0..2 {
        let out = Command::new(bl_binary())
            .args(["egress", "send", "--connection", "c1", "--admitted"])
            .arg(&admitted)
            .arg("--run-dir")
            .arg(&run)
            .env("BL_TEST_SEND_KEY", "sk-live-do-not-print")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }
    let log = bl_e2e::log_text(&run.join(RunDir::EGRESS_EVENTS));
    let kinds = bl_e2e::event_types(&run.join(RunDir::EGRESS_EVENTS));
    assert_eq!(
        kinds,
        [
            "lease.issued",
            "egress.denied",
            "lease.issued",
            "egress.denied"
        ]
    );
    assert!(!log.contains("sk-live-do-not-print"));
    assert!(log.contains("\"run_id\":\"demo-run-1\""));

    let verify = |run: &std::path::Path| {
        let out = Command::new(bl_binary())
            .args(["verify", "--json"])
            .arg(run)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let egress = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "egress")
            .unwrap()
            .clone();
        (out.status.code().unwrap(), egress)
    };
    let (code, egress) = verify(&run);
    assert_eq!(code, 0, "{egress}");
    assert!(
        egress["detail"]
            .as_str()
            .unwrap()
            .starts_with("4 broker decisions"),
        "{egress}"
    );
    let tampered = log.replacen("egress.denied", "egress.dEnied", 1);
    std::fs::write(run.join(RunDir::EGRESS_EVENTS), tampered).unwrap();
    let (code, egress) = verify(&run);
    assert_eq!(
        (code, egress["status"].as_str()),
        (1, Some("fail")),
        "{egress}"
    );
}
