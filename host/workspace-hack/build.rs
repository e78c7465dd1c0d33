// Empty: a build script is what makes cargo resolve the build-dependencies
// above with the derives' own (see Cargo.toml).
fn main() {}
