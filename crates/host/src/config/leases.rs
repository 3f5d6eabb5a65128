//! The `[leases]` table (lease design §0 "Config", docs/leases.md, docs/operations.md): the
//! TTLs, warnings, renewal, caps and guard of the hub's leases. Optional, as is each key: an
//! absent one takes the design's default, so a hub without the table serves leases with them.
//!
//! Owns the raw TOML form and its validation into `agent_hub_proto::hub::leases::LeaseConfig`,
//! each key's bound checked at start with the one error shape of `bounds` (key, value, bound).
//! Refuses: a value outside its bound, `min_ttl_secs` above `max_ttl_secs`, a default TTL
//! outside them, an `auto_renew` or `guard` word off its list. `[relay] lease_authority`
//! comes with the fleet (part D), not here.

use super::bounds::{self, Unit};
use super::ConfigError;
use agent_hub_proto::hub::leases::{AutoRenew, Guard, LeaseConfig};
use agent_hub_proto::kernel::lease_match::MAX_VALUE_BYTES;
use agent_hub_proto::wire::lease::MAX_CHECK_PATHS;
use serde::Deserialize;

/// The longest TTL: a week (claudectl's `ttl_secs` bound).
pub const MAX_TTL_SECS: u64 = 604_800;
/// The longest warning ahead of an expiry: an hour.
pub const MAX_WARN_BEFORE_SECS: u64 = 3600;
/// `max_per_identity`'s bound.
pub const MAX_PER_IDENTITY: u64 = 4096;
/// `max_leases`' and `max_waiters`' bound (hub-wide).
pub const MAX_HUB_LEASES: u64 = 65_536;
/// `max_waiters_per_resource`'s bound.
pub const MAX_WAITERS_PER_RESOURCE: u64 = 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLeases {
    default_ttl_secs: Option<u64>,
    min_ttl_secs: Option<u64>,
    max_ttl_secs: Option<u64>,
    warn_before_secs: Option<u64>,
    auto_renew: Option<String>,
    max_per_identity: Option<u64>,
    max_leases: Option<u64>,
    max_waiters: Option<u64>,
    max_waiters_per_resource: Option<u64>,
    max_value_bytes: Option<u64>,
    max_check_paths: Option<u64>,
    guard: Option<String>,
}

/// Validates `[leases]` (absent: every default).
pub(super) fn from_raw(raw: Option<RawLeases>) -> Result<LeaseConfig, ConfigError> {
    let raw = raw.unwrap_or_default();
    let d = LeaseConfig::default();
    let count =
        |key: &str, v: Option<u64>, default: usize, max: u64| -> Result<usize, ConfigError> {
            let v = v.unwrap_or(default as u64);
            bounds::check(&format!("leases.{key}"), v, 1, max, Unit::Count)?;
            // Invariant-free: every bound here is far below usize::MAX.
            Ok(usize::try_from(v).unwrap_or(usize::MAX))
        };
    let secs = |key: &str, v: Option<u64>, default: u64, max: u64| -> Result<u64, ConfigError> {
        let v = v.unwrap_or(default);
        bounds::check(&format!("leases.{key}"), v, 1, max, Unit::Secs)?;
        Ok(v)
    };
    let min_ttl_secs = secs(
        "min_ttl_secs",
        raw.min_ttl_secs,
        d.min_ttl_secs,
        MAX_TTL_SECS,
    )?;
    let max_ttl_secs = secs(
        "max_ttl_secs",
        raw.max_ttl_secs,
        d.max_ttl_secs,
        MAX_TTL_SECS,
    )?;
    if min_ttl_secs > max_ttl_secs {
        return Err(ConfigError::Invalid(format!(
            "leases.min_ttl_secs = {min_ttl_secs} is above leases.max_ttl_secs = {max_ttl_secs}"
        )));
    }
    // The default TTL defaults into the bounds the operator set, so lowering max_ttl_secs
    // alone is enough.
    let default_ttl = raw
        .default_ttl_secs
        .unwrap_or(d.default_ttl_secs.clamp(min_ttl_secs, max_ttl_secs));
    bounds::check(
        "leases.default_ttl_secs",
        default_ttl,
        min_ttl_secs,
        max_ttl_secs,
        Unit::Secs,
    )?;
    let auto_renew = match raw.auto_renew.as_deref() {
        None | Some("live") => AutoRenew::Live,
        Some("never") => AutoRenew::Never,
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "leases.auto_renew {other:?} is not \"live\" or \"never\""
            )))
        }
    };
    let guard = match raw.guard.as_deref() {
        None | Some("refuse") => Guard::Refuse,
        Some("warn") => Guard::Warn,
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "leases.guard {other:?} is not \"refuse\" or \"warn\""
            )))
        }
    };
    Ok(LeaseConfig {
        default_ttl_secs: default_ttl,
        min_ttl_secs,
        max_ttl_secs,
        warn_before_secs: secs(
            "warn_before_secs",
            raw.warn_before_secs,
            d.warn_before_secs,
            MAX_WARN_BEFORE_SECS,
        )?,
        auto_renew,
        max_per_identity: count(
            "max_per_identity",
            raw.max_per_identity,
            d.max_per_identity,
            MAX_PER_IDENTITY,
        )?,
        max_leases: count("max_leases", raw.max_leases, d.max_leases, MAX_HUB_LEASES)?,
        max_waiters: count(
            "max_waiters",
            raw.max_waiters,
            d.max_waiters,
            MAX_HUB_LEASES,
        )?,
        max_waiters_per_resource: count(
            "max_waiters_per_resource",
            raw.max_waiters_per_resource,
            d.max_waiters_per_resource,
            MAX_WAITERS_PER_RESOURCE,
        )?,
        max_value_bytes: {
            let v = raw.max_value_bytes.unwrap_or(d.max_value_bytes as u64);
            bounds::check(
                "leases.max_value_bytes",
                v,
                1,
                MAX_VALUE_BYTES as u64,
                Unit::Bytes,
            )?;
            usize::try_from(v).unwrap_or(MAX_VALUE_BYTES)
        },
        max_check_paths: count(
            "max_check_paths",
            raw.max_check_paths,
            d.max_check_paths,
            MAX_CHECK_PATHS as u64,
        )?,
        guard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<LeaseConfig, ConfigError> {
        let raw: RawLeases = toml::from_str(body).map_err(|e| ConfigError::Toml(e.to_string()))?;
        from_raw(Some(raw))
    }

    #[test]
    fn absent_keys_take_the_designs_defaults() {
        assert_eq!(from_raw(None).expect("defaults"), LeaseConfig::default());
        assert_eq!(parse("").expect("empty table"), LeaseConfig::default());
        let c =
            parse("auto_renew = \"never\"\nguard = \"warn\"\nmax_ttl_secs = 60\n").expect("valid");
        assert_eq!(
            (c.auto_renew, c.guard, c.default_ttl_secs),
            (AutoRenew::Never, Guard::Warn, 60)
        );
    }

    /// Each key's low and high edge: the edge itself passes, one past it is refused, naming
    /// the key, the value and the bound.
    #[test]
    fn every_key_is_bounded_at_both_edges() {
        let keys: [(&str, u64); 9] = [
            ("min_ttl_secs", MAX_TTL_SECS),
            ("max_ttl_secs", MAX_TTL_SECS),
            ("warn_before_secs", MAX_WARN_BEFORE_SECS),
            ("max_per_identity", MAX_PER_IDENTITY),
            ("max_leases", MAX_HUB_LEASES),
            ("max_waiters", MAX_HUB_LEASES),
            ("max_waiters_per_resource", MAX_WAITERS_PER_RESOURCE),
            ("max_value_bytes", 512),
            ("max_check_paths", 256),
        ];
        for (key, max) in keys {
            // min_ttl_secs at its top needs default_ttl_secs within it.
            let extra = if key == "min_ttl_secs" {
                format!("default_ttl_secs = {max}\n")
            } else {
                String::new()
            };
            assert!(parse(&format!("{key} = 1\n")).is_ok(), "{key} = 1");
            assert!(
                parse(&format!("{extra}{key} = {max}\n")).is_ok(),
                "{key} = {max}"
            );
            let low = parse(&format!("{key} = 0\n")).expect_err("0 refused");
            assert_eq!(
                low.to_string(),
                format!("config is invalid: leases.{key} must be greater than 0")
            );
            let high = parse(&format!("{key} = {}\n", max + 1)).expect_err("over refused");
            assert!(
                high.to_string().starts_with(&format!(
                    "config is invalid: leases.{key} = {} is above its upper bound of {max}",
                    max + 1
                )),
                "{high}"
            );
        }
    }

    #[test]
    fn ttls_must_nest_and_words_must_be_known() {
        assert_eq!(
            parse("min_ttl_secs = 10\nmax_ttl_secs = 5\n")
                .expect_err("refused")
                .to_string(),
            "config is invalid: leases.min_ttl_secs = 10 is above leases.max_ttl_secs = 5"
        );
        assert!(parse("min_ttl_secs = 10\ndefault_ttl_secs = 5\n")
            .expect_err("refused")
            .to_string()
            .starts_with("config is invalid: leases.default_ttl_secs must be at least 10"));
        assert!(parse("auto_renew = \"always\"\n").is_err());
        assert!(parse("guard = \"deny\"\n").is_err());
        assert!(parse("unknown_key = 1\n").is_err());
    }
}
