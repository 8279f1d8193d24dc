//! `RCOLL_UNIQUE_ID` from arbitrary text: parsing must never panic, and what it accepts
//! must be a secret by the rule the configuration reference (docs/src/configuration.md)
//! states — exactly 32 hexadecimal digits after trimming and an optional `0x`, not all
//! zero — which this target checks on its own, and must read back the same from its
//! canonical form. The first 128 bytes, when there are as many, are also read as the
//! C and Python form (`UniqueId::from_bytes`): never a panic, and what it accepts must be
//! exactly what `to_bytes` writes back (magic, family, port, address, a nonzero secret,
//! zeros).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcoll_transport::launcher::parse_unique_id;

fuzz_target!(|data: &[u8]| {
    if let Some(bytes) = data.first_chunk::<{ rcoll::process::UNIQUE_ID_BYTES }>() {
        if let Ok(id) = rcoll::process::UniqueId::from_bytes(bytes) {
            assert_eq!(&id.to_bytes(), bytes, "accepted a non-canonical id");
        }
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let t = text.trim();
    let digits = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")).unwrap_or(t);
    let by_rule = digits.len() == 32
        && digits.bytes().all(|b| b.is_ascii_hexdigit())
        && digits.bytes().any(|b| b != b'0');
    match parse_unique_id(text) {
        Ok(id) => {
            assert!(by_rule, "accepted {text:?}");
            assert_ne!(id, 0);
            assert_eq!(parse_unique_id(&format!("{id:032x}")), Ok(id));
        }
        Err(why) => {
            assert!(!by_rule, "refused {text:?}: {why}");
            // The refusal never repeats a secret-like text: it may be a secret with a typo.
            if digits.len() >= 8 && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                assert!(!why.contains(digits), "{why}");
            }
        }
    }
});
