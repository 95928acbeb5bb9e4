//! Set values (placeholder until the set type lands).
#[derive(Clone, Default)]
pub struct Set {
    pub members: hashbrown::HashSet<Vec<u8>>,
}

impl Set {
    /// Every member, in no particular order (used by ZUNIONSTORE & co, which take sets as inputs).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.members.iter().map(|m| &m[..])
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        self.members.contains(m)
    }
}
