//! `bl egress check` through the real binary: exit 0 allow, 1 deny, with the
//! class of each address. Only literal addresses and reserved names are
//! used, so no test needs outside DNS.

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
