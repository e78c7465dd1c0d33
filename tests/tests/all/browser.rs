//! Real headless Chromium for the page tests: Debian's `chromium`, driven
//! either alone (`--dump-dom`, `--screenshot`) or through its
//! `chromedriver` with the fantoccini WebDriver client. Both are installed
//! by `scripts/dev test`; where they are absent a test skips, loudly, and
//! under `CI=true` it fails.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium's flags here: headless, as root, and with no network of its
/// own (no background requests that this machine's network would refuse).
const FLAGS: [&str; 7] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Whether the browser (and, with `driver`, chromedriver) is here.
pub fn available(driver: bool) -> bool {
    let present = Path::new(CHROMIUM).is_file() && (!driver || Path::new(CHROMEDRIVER).is_file());
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but chromium or chromedriver is not installed: scripts/dev test should have installed them"
        );
        eprintln!(
            "SKIPPED: chromium or chromedriver is not installed on this machine; no page was opened"
        );
    }
    present
}

/// Chromium with its flags and a fresh profile in `profile`.
pub fn headless(profile: &Path) -> Command {
    let mut command = Command::new(CHROMIUM);
    command
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// chromedriver on a free loopback port, ended with the test.
pub struct Driver {
    child: Child,
    pub port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let driver = Driver { child, port };
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    /// Runs `drive` with a WebDriver session of headless Chromium (a fresh
    /// profile), on a runtime of its own, and closes the session after.
    pub fn drive<T>(&self, drive: impl AsyncFnOnce(&fantoccini::Client) -> T) -> T {
        let profile = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
            args.push(format!("--user-data-dir={}", profile.path().display()));
            let mut capabilities = serde_json::Map::new();
            capabilities.insert(
                "goog:chromeOptions".into(),
                serde_json::json!({ "binary": CHROMIUM, "args": args }),
            );
            // WebDriver over plain HTTP on loopback: no TLS.
            let client = fantoccini::ClientBuilder::new(
                hyper_util::client::legacy::connect::HttpConnector::new(),
            )
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a WebDriver session");
            let result = drive(&client).await;
            client.close().await.unwrap();
            result
        })
    }
}

/// The page as the browser shows it is not blank: a PNG of the window
/// holds more than a blank window's few kilobytes.
pub async fn assert_not_blank(client: &fantoccini::Client, page: &str) {
    let png = client.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "{page}: not a PNG");
    assert!(
        png.len() > 8_000,
        "{page} looks blank: a {} byte screenshot",
        png.len()
    );
}

/// On a console page: clicks Approve on `node`'s card and waits for
/// what the page says came of it.
pub async fn approve(client: &fantoccini::Client, node: &str) -> String {
    decide(
        client,
        &format!(r#"section.approval[data-node="{node}"]"#),
        "approved",
    )
    .await
}

/// On a console page: clicks the button for `decision` on the card that
/// `card` selects, and waits for what the page says came of it.
pub async fn decide(client: &fantoccini::Client, card: &str, decision: &str) -> String {
    use fantoccini::Locator;
    let found = client.wait().for_element(Locator::Css(card)).await.unwrap();
    found
        .find(Locator::Css(&format!(
            r#"button[data-decision="{decision}"]"#
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css(&format!("{card}[data-outcome]")))
        .await
        .unwrap()
        .find(Locator::Css(".outcome"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Goes to `url` and waits until the page's script says it is ready.
pub async fn open(client: &fantoccini::Client, url: &str) {
    client.goto(url).await.unwrap();
    client
        .wait()
        .for_element(fantoccini::Locator::Css(r#"body[data-ready="true"]"#))
        .await
        .unwrap();
}

/// The text of the element with `id`.
pub async fn text(client: &fantoccini::Client, id: &str) -> String {
    client
        .find(fantoccini::Locator::Id(id))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
