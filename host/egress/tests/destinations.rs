//! Table-driven: every spelling of every special-purpose address is denied,
//! and public unicast is allowed.

use bl_egress::{Denial, HostKind, UrlDecision, judge_url};

fn denied_as(url: &str) -> String {
    match judge_url(url) {
        UrlDecision::Deny(Denial::Address { class, .. }) => class,
        UrlDecision::Deny(other) => format!("{other:?}"),
        UrlDecision::Allow(d) => panic!("{url} was allowed as {d:?}"),
    }
}

#[test]
fn every_ipv4_spelling_of_loopback_and_metadata_is_denied() {
    for url in [
        "http://127.0.0.1/",
        "http://2130706433/",   // decimal
        "http://017700000001/", // octal
        "http://0x7f000001/",   // hex
        "http://0x7f.1/",       // short hex
        "http://127.1/",        // short
        "http://0177.0.0.1/",   // octal octet
        "http://127.000.000.001/",
        "HTTP://LOCALHOST./",
    ] {
        let reason = denied_as(url);
        assert!(
            reason == "loopback" || reason.contains("InternalName"),
            "{url}: {reason}"
        );
    }
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://2852039166/",
        "http://0xa9fea9fe/",
        "http://0251.0376.0251.0376/",
    ] {
        assert_eq!(denied_as(url), "link_local", "{url}");
    }
}

#[test]
fn every_special_purpose_ipv4_range_is_denied() {
    let table = [
        ("0.1.2.3", "this_network"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "shared_cgnat"),
        ("100.127.255.254", "shared_cgnat"),
        ("169.254.1.1", "link_local"),
        ("192.0.0.8", "reserved"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("192.88.99.1", "reserved"),
    ];
    for (ip, class) in table {
        assert_eq!(denied_as(&format!("https://{ip}/")), class, "{ip}");
    }
}

#[test]
fn ipv6_special_ranges_and_embedded_ipv4_are_denied() {
    let table = [
        ("[::1]", "loopback"),
        ("[::]", "unspecified"),
        ("[::ffff:127.0.0.1]", "embeds_ipv4(loopback)"),
        ("[::ffff:169.254.169.254]", "embeds_ipv4(link_local)"),
        ("[::ffff:7f00:1]", "embeds_ipv4(loopback)"),
        ("[::10.0.0.1]", "embeds_ipv4(private)"),
        ("[64:ff9b::192.168.0.1]", "embeds_ipv4(private)"),
        ("[2002:7f00:1::]", "tunnel(loopback)"),
        ("[2002:808:808::]", "tunnel(public)"),
        ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "tunnel(loopback)"),
        ("[fc00::1]", "unique_local"),
        ("[fd12:3456::1]", "unique_local"),
        ("[fe80::1]", "link_local"),
        ("[fec0::1]", "site_local"),
        ("[ff02::1]", "multicast"),
        ("[2001:db8::1]", "documentation"),
        ("[3fff::1]", "documentation"),
        ("[2001:2::1]", "benchmarking"),
        ("[100::1]", "discard"),
        ("[64:ff9b:1::1]", "reserved"),
        ("[4000::1]", "reserved"),
    ];
    for (host, class) in table {
        assert_eq!(denied_as(&format!("http://{host}/")), class, "{host}");
    }
}

#[test]
fn names_schemes_and_userinfo() {
    for url in [
        "http://localhost:8080/",
        "http://api.localhost/",
        "https://db.internal/x",
        "https://corp.INTERNAL./",
    ] {
        assert!(
            matches!(judge_url(url), UrlDecision::Deny(Denial::InternalName(_))),
            "{url}"
        );
    }
    for url in [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://example.com/",
        "javascript:alert(1)",
    ] {
        assert!(
            matches!(judge_url(url), UrlDecision::Deny(Denial::Scheme(_))),
            "{url}"
        );
    }
    for url in [
        "https://user@example.com/",
        "https://user:pw@example.com/",
        "https://:pw@example.com/",
    ] {
        assert_eq!(judge_url(url), UrlDecision::Deny(Denial::Userinfo), "{url}");
    }
    assert!(matches!(
        judge_url("not a url"),
        UrlDecision::Deny(Denial::Unparseable(_))
    ));
}

#[test]
fn public_unicast_is_allowed_and_names_wait_for_resolution() {
    for (url, port) in [
        ("https://8.8.8.8/", 443),
        ("http://1.1.1.1:8080/x", 8080),
        ("https://[2606:4700::1111]/", 443),
        ("http://[::ffff:8.8.8.8]/", 80),
    ] {
        match judge_url(url) {
            UrlDecision::Allow(d) => assert_eq!(d.port, port, "{url}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    match judge_url("https://Example.COM./path") {
        UrlDecision::Allow(d) => assert_eq!(d.host, HostKind::Name("example.com".into())),
        other => panic!("{other:?}"),
    }
}
