//! The one refusal type of the graph compiler: a typed code (rendered as
//! bounded-loops' code string), the JSON pointer of what was refused, the
//! message, and where it was written when that is known. Parsing,
//! validation, the artifact-ports checks and compilation all refuse with
//! it.

use std::fmt;

use crate::doc::Pos;

macro_rules! refusal_codes {
    ($($variant:ident => $name:literal,)*) => {
        /// Every refusal code, by bounded-loops' name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RefusalCode {
            $(#[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl RefusalCode {
            /// Every code, in alphabetical order of its name.
            pub const ALL: &'static [RefusalCode] = &[$(RefusalCode::$variant,)*];

            /// bounded-loops' code string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(RefusalCode::$variant => $name,)*
                }
            }
        }
    };
}

refusal_codes! {
    AbsolutePath => "absolute_path",
    ApiVersion => "api_version",
    ArtifactHandoff => "artifact_handoff",
    AuditProfile => "audit_profile",
    ConnectionSnapshot => "connection_snapshot",
    Cycle => "cycle",
    DuplicateEffect => "duplicate_effect",
    DuplicateKey => "duplicate_key",
    DuplicateNodeId => "duplicate_node_id",
    DuplicateSlotId => "duplicate_slot_id",
    DuplicateValue => "duplicate_value",
    EdgeCondition => "edge_condition",
    Enum => "enum",
    Extension => "extension",
    FailMode => "fail_mode",
    Identifier => "identifier",
    ImpossibleJoin => "impossible_join",
    IncompleteBranches => "incomplete_branches",
    InputUnbound => "input_unbound",
    InvalidJson => "invalid_json",
    InvalidYaml => "invalid_yaml",
    IoError => "io_error",
    JoinMode => "join_mode",
    MissingField => "missing_field",
    MissingInputPort => "missing_input_port",
    MissingOutputPort => "missing_output_port",
    MutablePackageReference => "mutable_package_reference",
    NoAdmittedConnection => "no_admitted_connection",
    OnFailure => "on_failure",
    OnFailureUnimplemented => "on_failure_unimplemented",
    OutputPathConflict => "output_path_conflict",
    PackageUnavailable => "package_unavailable",
    PortDuplicate => "port_duplicate",
    PortTypeMismatch => "port_type_mismatch",
    ProviderInSlot => "provider_in_slot",
    Range => "range",
    RepairBudget => "repair_budget",
    RepairTarget => "repair_target",
    ReservedPath => "reserved_path",
    RetryOfEffectfulNode => "retry_of_effectful_node",
    SecretField => "secret_field",
    Type => "type",
    UnknownConnectionSlot => "unknown_connection_slot",
    UnknownEdgeNode => "unknown_edge_node",
    UnknownField => "unknown_field",
    UnknownNodeKind => "unknown_node_kind",
    UnsupportedExtension => "unsupported_extension",
    Version => "version",
    Visibility => "visibility",
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RefusalCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for RefusalCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<RefusalCode> for &str {
    fn eq(&self, other: &RefusalCode) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<RefusalCode> for serde_json::Value {
    fn eq(&self, other: &RefusalCode) -> bool {
        self.as_str() == Some(other.as_str())
    }
}

/// Why a manifest, a connections file or a compile was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: RefusalCode,
    pub message: String,
    /// The JSON pointer of what was refused (`/` for the whole document).
    pub pointer: String,
    /// Where the offending value was written, when known.
    pub pos: Option<Pos>,
    /// A pointer to the exact key or value at fault when it is more precise
    /// than `pointer` (which is bounded-loops', and stays as it is): an
    /// unknown field's own key. Used only to find `pos`.
    pub focus: Option<String>,
    /// bl's own lines beneath bounded-loops' one: the bad value and what
    /// was expected, "did you mean", the members of a cycle, the fix.
    pub hints: Vec<String>,
}

impl Refusal {
    /// A refusal at `pointer`, its position not yet known.
    pub fn new(
        code: RefusalCode,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            pointer: pointer.into(),
            pos: None,
            focus: None,
            hints: Vec::new(),
        }
    }

    /// Adds one of bl's own lines beneath bounded-loops' message.
    pub fn hint(mut self, line: impl Into<String>) -> Refusal {
        self.hints.push(line.into());
        self
    }

    /// Locates the refusal at `pointer` rather than at its own pointer.
    pub fn focused(mut self, pointer: impl Into<String>) -> Refusal {
        self.focus = Some(pointer.into());
        self
    }

    /// The same refusal, `Err`.
    pub fn err<T>(
        code: RefusalCode,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Result<T, Refusal> {
        Err(Refusal::new(code, pointer, message))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {} — {}", self.code, self.pointer, self.message)
    }
}

impl std::error::Error for Refusal {}

pub use bl_core::spelling::closest;

/// A "did you mean" line, when one of `known` is close to `word`.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    closest(word, known).map(|k| format!("did you mean `{k}` (not `{word}`)?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_render_as_bounded_loops_names_and_are_sorted_and_unique() {
        let names: Vec<&str> = RefusalCode::ALL.iter().map(|c| c.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        assert_eq!(
            RefusalCode::UnknownNodeKind.to_string(),
            "unknown_node_kind"
        );
        assert!(RefusalCode::Cycle == "cycle");
    }
}
