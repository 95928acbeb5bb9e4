//! Hash values (placeholder until the hash type lands).
#[derive(Clone, Default)]
pub struct Hash {
    pub map: hashbrown::HashMap<Vec<u8>, Vec<u8>>,
}
