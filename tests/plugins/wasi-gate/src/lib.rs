//! A gate that reads the WASI clock, randomness and environment and reports
//! them in its summary, so tests can see what the deny-all context hands a
//! wasm32-wasip2-style component.

wit_bindgen::generate!({
    inline: "
        package test:wasi-gate;
        world wasi-gate {
            include bl:plugin/gate@1.1.0;
            import wasi:random/random@0.2.0;
            import wasi:clocks/wall-clock@0.2.0;
            import wasi:cli/environment@0.2.0;
        }
    ",
    path: ["../../../wit/plugin", "wit/random", "wit/clocks", "wit/cli"],
    world: "test:wasi-gate/wasi-gate",
    generate_all,
});

struct WasiGate;

impl Guest for WasiGate {
    fn check(_root: &Dir, _config: String) -> Result<Verdict, PluginError> {
        let now = wasi::clocks::wall_clock::now();
        let random = [
            wasi::random::random::get_random_u64(),
            wasi::random::random::get_random_u64(),
        ];
        let env = wasi::cli::environment::get_environment();
        Ok(Verdict {
            passed: true,
            summary: format!(
                "clock={} random={:x},{:x} env={}",
                now.seconds,
                random[0],
                random[1],
                env.len()
            ),
            findings: Vec::new(),
            evidence_digest: None,
        })
    }
}

export!(WasiGate);
