//! A gate that misbehaves on purpose, in the way `{"mode": …}` names, so the
//! host's limits and refusals are tested against a real component.

use bl_plugin_sdk::{PluginError, Verdict, Workspace};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Config {
    pub mode: String,
}

pub struct Hostile;

impl bl_plugin_sdk::Gate for Hostile {
    type Config = Config;

    fn check(ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        match config.mode.as_str() {
            "pass" => Ok(Verdict::pass("behaved")),
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "output" => Ok(Verdict::pass("x".repeat(64 << 20))),
            // Asks for 2 GiB with memory.grow directly, ignores the refusal
            // (-1) and claims a pass: the host must trap it instead.
            #[cfg(target_arch = "wasm32")]
            "grow-and-carry-on" => {
                let grown = core::arch::wasm32::memory_grow(0, 32768);
                Ok(Verdict::pass(format!("survived memory.grow ({grown})")))
            }
            // Reads a FIFO the workspace holds (no writer ever comes).
            "read-fifo" => match ws.read("fifo") {
                Ok(bytes) => Ok(Verdict::pass(format!("read {} bytes", bytes.len()))),
                Err(e) => Ok(Verdict::pass(bl_plugin_sdk::describe_fs_error(&e))),
            },
            "panic" => panic!("hostile gate panics"),
            // Each escape is refused by the host; the gate then claims a
            // pass anyway, which the host must not accept.
            "escape-dotdot" => {
                let _ = ws.read("../outside.txt");
                Ok(Verdict::pass("read nothing, honest"))
            }
            "escape-absolute" => {
                let _ = ws.read("/etc/passwd");
                Ok(Verdict::pass("read nothing, honest"))
            }
            "escape-symlink" => {
                let _ = ws.read("link/outside.txt");
                let _ = ws.read("filelink");
                Ok(Verdict::pass("read nothing, honest"))
            }
            other => Err(PluginError::BadConfig(format!("unknown mode {other}"))),
        }
    }
}

bl_plugin_sdk::export_gate!(Hostile);
