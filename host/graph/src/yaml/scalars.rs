//! YAML 1.1 scalars as PyYAML's resolver and constructors read them:
//! booleans, integers in every base, sexagesimals, floats, timestamps,
//! binary, and explicit tags.

use super::*;
use std::sync::LazyLock;

use regex::Regex;
use yaml_rust2::parser::Tag;
use yaml_rust2::scanner::TScalarStyle;

use crate::doc::{Kind, py_repr};

pub(super) static INT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$")
        .expect("valid regex")
});
pub(super) static FLOAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
    )
    .expect("valid regex")
});
pub(super) static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$",
    )
    .expect("valid regex")
});
pub(super) static BASE64: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9+/=\s]*$").expect("valid regex"));

/// Why a scalar has no value, in PyYAML's words.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConstructError {
    #[error("invalid {what} value: {}", py_repr(value))]
    Invalid { what: &'static str, value: String },
    #[error("expected a {0} node, but found scalar")]
    NotAScalar(&'static str),
    #[error("could not determine a constructor for the tag {}", py_repr(tag))]
    NoConstructor { tag: String },
    #[error("integer out of range: {0}")]
    IntOutOfRange(String),
}

/// A scalar's value: its explicit tag's constructor, else PyYAML's implicit
/// resolution of a plain scalar (YAML 1.1). `Err` is the construction
/// problem in PyYAML's words.
pub(super) fn construct_scalar(
    value: &str,
    style: TScalarStyle,
    tag: Option<&Tag>,
) -> Result<Kind, ConstructError> {
    let Some(tag) = tag else {
        return if style == TScalarStyle::Plain {
            resolve_plain(value)
        } else {
            Ok(Kind::Str(value.to_string()))
        };
    };
    let full = full_tag(tag);
    let invalid = |what: &'static str| ConstructError::Invalid {
        what,
        value: value.to_string(),
    };
    match full.strip_prefix(YAML_TAG) {
        Some("str") => Ok(Kind::Str(value.to_string())),
        Some("null") => Ok(Kind::Null),
        Some("bool") => match value.to_lowercase().as_str() {
            "yes" | "true" | "on" => Ok(Kind::Bool(true)),
            "no" | "false" | "off" => Ok(Kind::Bool(false)),
            _ => Err(invalid("boolean")),
        },
        Some("int") => yaml_int(value)
            .map(Kind::Int)
            .ok_or_else(|| invalid("integer")),
        Some("float") => yaml_float(value)
            .map(Kind::Float)
            .ok_or_else(|| invalid("float")),
        Some("binary") if BASE64.is_match(value) => Ok(Kind::Other("bytes")),
        Some("binary") => Err(invalid("base64")),
        Some("timestamp") if TIMESTAMP.is_match(value) => Ok(Kind::Other("timestamp")),
        Some("timestamp") => Err(invalid("timestamp")),
        Some("seq" | "omap" | "pairs") => Err(ConstructError::NotAScalar("sequence")),
        Some("map" | "set") => Err(ConstructError::NotAScalar("mapping")),
        _ => Err(ConstructError::NoConstructor { tag: full }),
    }
}

pub(super) fn resolve_plain(value: &str) -> Result<Kind, ConstructError> {
    Ok(match value {
        "" | "~" | "null" | "Null" | "NULL" => Kind::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Kind::Bool(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Kind::Bool(false)
        }
        // Implicitly tagged, with no constructor in the safe loader.
        "<<" => {
            return Err(ConstructError::NoConstructor {
                tag: format!("{YAML_TAG}merge"),
            });
        }
        "=" => {
            return Err(ConstructError::NoConstructor {
                tag: format!("{YAML_TAG}value"),
            });
        }
        // Every int, float and timestamp pattern starts with a sign, a digit
        // or a dot (PyYAML picks its resolvers by that first character), and
        // a plain decimal needs no pattern: most scalars never compile one.
        v if !v.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.')) => {
            Kind::Str(v.to_string())
        }
        v if is_plain_decimal(v) => Kind::Int(
            v.parse()
                .map_err(|_| ConstructError::IntOutOfRange(v.to_string()))?,
        ),
        v if INT.is_match(v) => {
            Kind::Int(yaml_int(v).ok_or_else(|| ConstructError::IntOutOfRange(v.to_string()))?)
        }
        v if FLOAT.is_match(v) => Kind::Float(yaml_float(v).unwrap_or(f64::NAN)),
        v if TIMESTAMP.is_match(v) => Kind::Other("timestamp"),
        v => Kind::Str(v.to_string()),
    })
}

/// `0`, or digits not starting with `0` (which would be octal): the
/// integers a manifest mostly holds, read without the INT pattern.
fn is_plain_decimal(v: &str) -> bool {
    v == "0" || (!v.starts_with('0') && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}

/// An integer as YAML 1.1 writes one (also under an explicit `!!int`):
/// underscores ignored, `0b`, `0x`, leading-`0` octal, `a:b:c` base 60.
pub(super) fn yaml_int(v: &str) -> Option<i128> {
    let cleaned = v.replace('_', "");
    let (neg, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let magnitude = if body == "0" {
        0
    } else if let Some(b) = body.strip_prefix("0b") {
        i128::from_str_radix(b, 2).ok()?
    } else if let Some(x) = body.strip_prefix("0x") {
        i128::from_str_radix(x, 16).ok()?
    } else if body.contains(':') {
        body.split(':').try_fold(0i128, |acc, part| {
            Some(acc * 60 + part.parse::<i128>().ok()?)
        })?
    } else if body.starts_with('0') {
        i128::from_str_radix(body, 8).ok()?
    } else {
        body.parse().ok()?
    };
    Some(if neg { -magnitude } else { magnitude })
}

/// A float as YAML 1.1 writes one (also under an explicit `!!float`, where
/// `1` is `1.0`).
pub(super) fn yaml_float(v: &str) -> Option<f64> {
    let cleaned = v.replace('_', "").to_lowercase();
    let (sign, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (-1.0, rest.to_string()),
        None => (1.0, cleaned.trim_start_matches('+').to_string()),
    };
    if body == ".inf" {
        return Some(sign * f64::INFINITY);
    }
    if body == ".nan" {
        return Some(f64::NAN);
    }
    if body.contains(':') {
        let total = body.split(':').try_fold(0.0, |acc, part| {
            Some(acc * 60.0 + part.parse::<f64>().ok()?)
        })?;
        return Some(sign * total);
    }
    Some(sign * body.parse::<f64>().ok()?)
}
