//! Leases: the broker's permission for exactly one outbound request.
//!
//! A lease names one admitted connection and one effect, and expires. It is
//! checked before anything else and consumed atomically only once the
//! request's destination has been judged, so a denied request leaves the
//! lease usable, and of any number of concurrent requests on one lease
//! exactly one is let through.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// A permission for one request on `connection_id` with `effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: String,
    pub connection_id: String,
    pub effect: String,
    pub expires_at: SystemTime,
}

/// Why a lease does not let a request through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseDenial {
    #[error("lease {0} was never issued")]
    Unknown(String),
    #[error("lease {0} was already used: a lease allows one request")]
    Consumed(String),
    #[error("lease {0} expired")]
    Expired(String),
    #[error("lease {id} grants effect {granted}, not {requested}")]
    WrongEffect {
        id: String,
        granted: String,
        requested: String,
    },
}

#[derive(Debug)]
enum Slot {
    Open(Lease),
    Consumed,
}

/// Every lease the broker issued, open or used.
#[derive(Debug, Default)]
pub struct LeaseBook {
    slots: Mutex<HashMap<String, Slot>>,
}

impl LeaseBook {
    pub fn issue(
        &self,
        connection_id: &str,
        effect: &str,
        ttl: Duration,
        now: SystemTime,
    ) -> Lease {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).expect("the OS random source is available");
        let lease = Lease {
            id: format!("lease-{}", hex::encode(id)),
            connection_id: connection_id.to_string(),
            effect: effect.to_string(),
            expires_at: now + ttl,
        };
        self.slots
            .lock()
            .expect("lease book lock")
            .insert(lease.id.clone(), Slot::Open(lease.clone()));
        lease
    }

    fn judge(
        slot: Option<&Slot>,
        id: &str,
        effect: &str,
        now: SystemTime,
    ) -> Result<Lease, LeaseDenial> {
        match slot {
            None => Err(LeaseDenial::Unknown(id.to_string())),
            Some(Slot::Consumed) => Err(LeaseDenial::Consumed(id.to_string())),
            Some(Slot::Open(lease)) if now >= lease.expires_at => {
                Err(LeaseDenial::Expired(id.to_string()))
            }
            Some(Slot::Open(lease)) if lease.effect != effect => Err(LeaseDenial::WrongEffect {
                id: id.to_string(),
                granted: lease.effect.clone(),
                requested: effect.to_string(),
            }),
            Some(Slot::Open(lease)) => Ok(lease.clone()),
        }
    }

    /// Whether the lease would let a request with `effect` through now,
    /// without using it.
    pub fn check(&self, id: &str, effect: &str, now: SystemTime) -> Result<Lease, LeaseDenial> {
        let slots = self.slots.lock().expect("lease book lock");
        Self::judge(slots.get(id), id, effect, now)
    }

    /// Uses the lease: the same checks as [`Self::check`] and the change to
    /// consumed under one lock, so only one caller ever gets `Ok`.
    pub fn consume(&self, id: &str, effect: &str, now: SystemTime) -> Result<Lease, LeaseDenial> {
        let mut slots = self.slots.lock().expect("lease book lock");
        let lease = Self::judge(slots.get(id), id, effect, now)?;
        slots.insert(id.to_string(), Slot::Consumed);
        Ok(lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_used_once_within_its_time_and_effect() {
        let book = LeaseBook::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let lease = book.issue("c1", "read_only", Duration::from_secs(60), now);
        assert!(matches!(
            book.consume(&lease.id, "external_write", now),
            Err(LeaseDenial::WrongEffect { .. })
        ));
        assert!(matches!(
            book.consume(&lease.id, "read_only", now + Duration::from_secs(60)),
            Err(LeaseDenial::Expired(_))
        ));
        // Neither refusal used it up.
        assert_eq!(book.check(&lease.id, "read_only", now).unwrap(), lease);
        assert_eq!(book.consume(&lease.id, "read_only", now).unwrap(), lease);
        assert!(matches!(
            book.consume(&lease.id, "read_only", now),
            Err(LeaseDenial::Consumed(_))
        ));
        assert!(matches!(
            book.check("lease-nope", "read_only", now),
            Err(LeaseDenial::Unknown(_))
        ));
    }
}
