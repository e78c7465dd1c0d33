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
