//! The plugin model: the four worlds, the capabilities a component may
//! import, and what the operator granted.
//!
//! A component's imports are its requests. Some are part of its world's
//! contract and come with every call (a gate's workspace, a transform's
//! artifacts); the rest must be granted by the operator, and the default is
//! deny. An import that is neither fails at load, naming the capability.

use std::collections::BTreeSet;
use std::fmt;

/// A capability name an operator or a manifest wrote that cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("unknown capability `{0}`; the capabilities are {names}", names = Capability::ALL.map(Capability::name).join(", "))]
    Unknown(String),
    #[error("`{0}` is not granted: it comes with the plugin's world")]
    ComesWithWorld(Capability),
}

/// One capability a plugin can be handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// A read-only view of the workspace (gates and contracts, always).
    Workspace,
    /// The declared inputs and the output sink (transforms, always).
    Artifacts,
    /// Runs an argv in the granted sandbox tier.
    Command,
    /// The structured log.
    Log,
    /// A real wall and monotonic clock; without it WASI clocks read zero.
    Clock,
    /// Real randomness; without it WASI random is a fixed stream.
    Random,
}

impl Capability {
    pub const ALL: [Capability; 6] = [
        Capability::Workspace,
        Capability::Artifacts,
        Capability::Command,
        Capability::Log,
        Capability::Clock,
        Capability::Random,
    ];

    /// The operator-facing name, as written in manifests and `--grant`.
    pub fn name(self) -> &'static str {
        match self {
            Capability::Workspace => "workspace",
            Capability::Artifacts => "artifacts",
            Capability::Command => "command",
            Capability::Log => "log",
            Capability::Clock => "clock",
            Capability::Random => "random",
        }
    }

    pub fn parse(name: &str) -> Result<Capability, GrantError> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| GrantError::Unknown(name.to_string()))
    }

    /// Whether every plugin of `world` is handed this with each call.
    pub fn intrinsic_to(self, world: World) -> bool {
        matches!(
            (self, world),
            (
                Capability::Workspace,
                World::Gate | World::CompletionContract
            ) | (Capability::Artifacts, World::Transform)
        )
    }

    /// Whether an operator grants this at all (the rest come with the world).
    pub fn grantable(self) -> bool {
        !matches!(self, Capability::Workspace | Capability::Artifacts)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one component import asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportClass {
    /// Type definitions only; asks for nothing.
    TypesOnly,
    Capability(Capability),
    /// A WASI interface the deny-all context serves (no files, no sockets,
    /// no environment, empty stdin, discarded stdout).
    DenyAllWasi,
    /// Nothing bl provides.
    Unknown,
}

/// One top-level import of a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// e.g. `bl:plugin/command@1.1.0`, or a bare type name.
    pub name: String,
    /// Whether it brings any function the component can call. An import of
    /// types alone (a record, a resource without its methods) grants nothing.
    pub has_functions: bool,
}

impl Import {
    pub fn new(name: impl Into<String>, has_functions: bool) -> Self {
        Import {
            name: name.into(),
            has_functions,
        }
    }
}

/// Classifies an import by its name, e.g. `bl:plugin/command@1.1.0`.
pub fn classify(import: &Import) -> ImportClass {
    if !import.has_functions {
        return ImportClass::TypesOnly;
    }
    classify_import(&import.name)
}

/// Classifies a function-bearing import by its name.
pub fn classify_import(name: &str) -> ImportClass {
    let unversioned = name.split('@').next().unwrap_or(name);
    match unversioned {
        "bl:plugin/types" => ImportClass::TypesOnly,
        "bl:plugin/workspace" => ImportClass::Capability(Capability::Workspace),
        "bl:plugin/artifacts" => ImportClass::Capability(Capability::Artifacts),
        "bl:plugin/command" => ImportClass::Capability(Capability::Command),
        "bl:plugin/log" => ImportClass::Capability(Capability::Log),
        n if n.starts_with("wasi:clocks/") => ImportClass::Capability(Capability::Clock),
        n if n.starts_with("wasi:random/") => ImportClass::Capability(Capability::Random),
        // What the host links, deny-all; any other WASI (wasi:http, say) is
        // refused at admission rather than failing to link.
        n if ["wasi:cli/", "wasi:io/", "wasi:filesystem/", "wasi:sockets/"]
            .iter()
            .any(|linked| n.starts_with(linked)) =>
        {
            ImportClass::DenyAllWasi
        }
        _ => ImportClass::Unknown,
    }
}

/// The capabilities the operator granted one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants(BTreeSet<Capability>);

impl Grants {
    /// Nothing granted: the default.
    pub fn none() -> Self {
        Grants::default()
    }

    pub fn of(capabilities: impl IntoIterator<Item = Capability>) -> Self {
        Grants(capabilities.into_iter().collect())
    }

    /// Parses operator-written names, refusing unknown ones and the ones that
    /// come with a world rather than a grant.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, GrantError> {
        let mut set = BTreeSet::new();
        for name in names {
            let capability = Capability::parse(name.as_ref())?;
            if !capability.grantable() {
                return Err(GrantError::ComesWithWorld(capability));
            }
            set.insert(capability);
        }
        Ok(Grants(set))
    }

    pub fn allows(&self, capability: Capability) -> bool {
        self.0.contains(&capability)
    }

    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }
}

/// Why a component was not admitted, as the sentence after "the plugin
/// cannot load:".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error(
        "it imports `{0}`, which bl does not provide to plugins (bl links only its own \
         interfaces and WASI's cli, io, clocks, random, filesystem and sockets, all deny-all; \
         never wasi:http); build it against bl's worlds (wit/plugin, or wit-minimal for Python \
         and JavaScript), which import nothing else"
    )]
    Unprovided(String),
    #[error("it imports `{import}` ({capability}), which a {world} plugin is never handed")]
    NotForWorld {
        import: String,
        capability: Capability,
        world: World,
    },
    #[error("it imports the `{0}` capability, but its manifest does not request it")]
    Undeclared(Capability),
    #[error(
        "it imports the `{0}` capability, which was not granted; grant it with `--grant {0}` \
         or in the manifest's `grants`, or use a plugin that does not need it"
    )]
    NotGranted(Capability),
}

/// Checks a component's imports against its world, its manifest's requests
/// (when there is a manifest) and the operator's grants. Returns the
/// capabilities the component requests.
pub fn admit(
    imports: &[Import],
    world: World,
    declared: Option<&[Capability]>,
    grants: &Grants,
) -> Result<BTreeSet<Capability>, AdmitError> {
    let mut requested = BTreeSet::new();
    for import in imports {
        let name = &import.name;
        match classify(import) {
            ImportClass::TypesOnly | ImportClass::DenyAllWasi => {}
            ImportClass::Unknown => {
                return Err(AdmitError::Unprovided(name.clone()));
            }
            ImportClass::Capability(c) => {
                if !c.grantable() && !c.intrinsic_to(world) {
                    return Err(AdmitError::NotForWorld {
                        import: name.clone(),
                        capability: c,
                        world,
                    });
                }
                requested.insert(c);
            }
        }
    }
    if let Some(declared) = declared {
        for c in &requested {
            if c.grantable() && !declared.contains(c) {
                return Err(AdmitError::Undeclared(*c));
            }
        }
    }
    for c in &requested {
        // WASI clocks and random load without a grant: they get the deny-all
        // stand-ins (a frozen clock, a fixed stream) instead of the real thing.
        if c.grantable()
            && !matches!(c, Capability::Clock | Capability::Random)
            && !grants.allows(*c)
        {
            return Err(AdmitError::NotGranted(*c));
        }
    }
    Ok(requested)
}

/// The four kinds of plugin, one WIT world each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    Gate,
    CompletionContract,
    Transform,
    PublicationPolicy,
}

impl World {
    pub const ALL: [World; 4] = [
        World::Gate,
        World::CompletionContract,
        World::Transform,
        World::PublicationPolicy,
    ];

    /// The world's name in the WIT package.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::Gate => "gate",
            World::CompletionContract => "completion-contract",
            World::Transform => "transform",
            World::PublicationPolicy => "publication-policy",
        }
    }

    pub fn from_wit_name(name: &str) -> Option<World> {
        World::ALL.into_iter().find(|w| w.wit_name() == name)
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}

/// The WIT package this build of bl speaks (plugins build against it; the
/// host loads it and any older minor version).
pub const WIT_PACKAGE: &str = "bl:plugin@1.1.0";

/// What sits beside every built component as `<name>.plugin.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginManifest {
    pub name: String,
    pub version: String,
    pub description: String,
    /// The world the component targets, e.g. `gate`.
    pub world: String,
    /// The WIT package the world comes from, e.g. `bl:plugin@1.1.0`.
    pub wit_package: String,
    /// The capabilities the component imports and so requests, e.g.
    /// `["command"]`. The operator grants them; the default is deny.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// A JSON Schema for the plugin's config, when the crate names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<serde_json::Value>,
    /// For completion contracts: the output basenames it checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contract_patterns: Vec<String>,
    /// `sha256:` over the plugin's source files.
    pub source_digest: String,
    /// `sha256:` over the component's bytes.
    pub component_digest: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(names: &[&str]) -> Vec<Import> {
        names.iter().map(|s| Import::new(*s, true)).collect()
    }

    #[test]
    fn type_only_imports_ask_for_nothing() {
        let types_only = vec![
            Import::new("bl:plugin/artifacts@1.1.0", false),
            Import::new("verdict", false),
        ];
        assert!(
            admit(&types_only, World::Gate, None, &Grants::none())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_interface_bl_does_not_link_is_refused_with_the_fix() {
        let http = imports(&["wasi:http/outgoing-handler@0.2.9", "wasi:cli/stderr@0.2.9"]);
        let refused = admit(&http, World::Gate, None, &Grants::none()).unwrap_err();
        assert_eq!(
            refused,
            AdmitError::Unprovided("wasi:http/outgoing-handler@0.2.9".into())
        );
        let said = refused.to_string();
        assert!(
            said.contains("never wasi:http") && said.contains("wit-minimal"),
            "{said}"
        );
        // What a Python plugin imports from WASI loads (deny-all).
        let python = imports(&[
            "wasi:cli/stderr@0.2.9",
            "wasi:filesystem/preopens@0.2.9",
            "wasi:sockets/tcp@0.2.9",
        ]);
        assert!(admit(&python, World::Gate, None, &Grants::none()).is_ok());
    }

    #[test]
    fn an_ungranted_capability_fails_naming_it() {
        let err = admit(
            &imports(&["bl:plugin/workspace@1.1.0", "bl:plugin/command@1.1.0"]),
            World::Gate,
            None,
            &Grants::none(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("`command` capability, which was not granted"),
            "{err}"
        );
        let ok = admit(
            &imports(&["bl:plugin/workspace@1.1.0", "bl:plugin/command@1.1.0"]),
            World::Gate,
            None,
            &Grants::of([Capability::Command]),
        )
        .unwrap();
        assert!(ok.contains(&Capability::Command));
    }

    #[test]
    fn intrinsic_capabilities_belong_to_their_world_only() {
        assert!(
            admit(
                &imports(&["bl:plugin/workspace@1.1.0"]),
                World::Gate,
                None,
                &Grants::none()
            )
            .is_ok()
        );
        let err = admit(
            &imports(&["bl:plugin/workspace@1.1.0"]),
            World::PublicationPolicy,
            None,
            &Grants::none(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("publication-policy plugin is never handed"),
            "{err}"
        );
    }

    #[test]
    fn the_manifest_must_request_what_the_component_imports() {
        let err = admit(
            &imports(&["bl:plugin/log@1.1.0"]),
            World::Gate,
            Some(&[]),
            &Grants::of([Capability::Log]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("manifest does not request it"),
            "{err}"
        );
    }

    #[test]
    fn wasi_loads_deny_all_and_unknown_imports_do_not() {
        let wasi = imports(&[
            "wasi:random/random@0.2.0",
            "wasi:cli/environment@0.2.0",
            "wasi:clocks/wall-clock@0.2.0",
        ]);
        assert!(admit(&wasi, World::Gate, None, &Grants::none()).is_ok());
        let err = admit(
            &imports(&["acme:evil/net"]),
            World::Gate,
            None,
            &Grants::none(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("acme:evil/net"), "{err}");
    }

    #[test]
    fn grants_parse_refuses_unknown_and_intrinsic_names() {
        assert!(Grants::parse(&["command", "log"]).is_ok());
        assert!(
            Grants::parse(&["network"])
                .unwrap_err()
                .to_string()
                .contains("unknown capability")
        );
        assert!(
            Grants::parse(&["workspace"])
                .unwrap_err()
                .to_string()
                .contains("comes with")
        );
    }
}
