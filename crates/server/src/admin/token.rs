//! Tokens for the roster (SPEC §6): 32 bytes from the kernel's random source as 64 hex
//! digits, and the private folder that holds their files (mode 700; SPEC §6.4); the files
//! themselves are read and written by `agent_hub_host::token_file`.
//! Owns nothing else; no function here returns a token in an error or prints one.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// A new token: 256 bits from /dev/urandom, hex.
pub fn random_token() -> Result<String, String> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| format!("cannot read random bytes from /dev/urandom: {e}"))?;
    Ok(key.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `dir` (mode 700) when missing. An existing folder is left as it is.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_hex_digits_and_differ() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
