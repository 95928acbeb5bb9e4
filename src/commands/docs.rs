//! COMMAND DOCS: the documentation Redis 7.0.15 gives for each command, answered from the
//! table tools/gen_command_docs.py generates into `super::command_docs` from Redis's own
//! command JSON files (its rows have the shapes of `super::doc_entry`). This module turns an
//! entry into the reply Redis's addReplyCommandDocs builds: fields in Redis's order, each
//! optional field only when set, and a container's `subcommands` limited to the subcommands
//! Podium runs.

use super::command_docs::DOCS;
use super::doc_entry::DocArg;
use super::latency;
use crate::protocol::Reply;

fn bulk(s: &str) -> Reply {
    Reply::bulk_slice(s.as_bytes())
}

fn field(out: &mut Vec<(Reply, Reply)>, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        out.push((bulk(key), bulk(v)));
    }
}

fn flag_set(flags: &'static [&'static str]) -> Reply {
    Reply::Set(flags.iter().map(|f| Reply::Status(f)).collect())
}

fn args_reply(args: &'static [DocArg]) -> Reply {
    Reply::Array(
        args.iter()
            .map(|a| {
                let mut m = vec![(bulk("name"), bulk(a.name)), (bulk("type"), bulk(a.kind))];
                if let Some(i) = a.key_spec_index {
                    m.push((bulk("key_spec_index"), Reply::Int(i)));
                }
                field(&mut m, "token", a.token);
                field(&mut m, "summary", a.summary);
                field(&mut m, "since", a.since);
                field(&mut m, "deprecated_since", a.deprecated_since);
                if !a.flags.is_empty() {
                    m.push((bulk("flags"), flag_set(a.flags)));
                }
                if let Some(sub) = a.arguments {
                    m.push((bulk("arguments"), args_reply(sub)));
                }
                Reply::Map(m)
            })
            .collect(),
    )
}

/// Index of `name`'s entry in [`DOCS`] (sorted by name, subcommands right after their
/// container, and `|` sorts after every character a command name uses).
fn find(name: &str) -> Option<usize> {
    DOCS.binary_search_by(|d| d.name.cmp(name)).ok()
}

/// Whether Podium runs the subcommand `container|sub`.
fn podium_has(full_name: &str) -> bool {
    latency::histograms().contains_key(full_name)
}

fn doc_reply(i: usize) -> Reply {
    let d = &DOCS[i];
    let mut m = Vec::with_capacity(10);
    field(&mut m, "summary", d.summary);
    field(&mut m, "since", d.since);
    m.push((bulk("group"), bulk(d.group)));
    field(&mut m, "complexity", d.complexity);
    if !d.doc_flags.is_empty() {
        m.push((bulk("doc_flags"), flag_set(d.doc_flags)));
    }
    field(&mut m, "deprecated_since", d.deprecated_since);
    field(&mut m, "replaced_by", d.replaced_by);
    if !d.history.is_empty() {
        let h = d
            .history
            .iter()
            .map(|(v, c)| Reply::Array(vec![bulk(v), bulk(c)]))
            .collect();
        m.push((bulk("history"), Reply::Set(h)));
    }
    if !d.arguments.is_empty() {
        m.push((bulk("arguments"), args_reply(d.arguments)));
    }
    if d.subcommands > 0 {
        let subs = (i + 1..=i + d.subcommands)
            .filter(|&j| podium_has(DOCS[j].name))
            .map(|j| (bulk(DOCS[j].name), doc_reply(j)))
            .collect();
        m.push((bulk("subcommands"), Reply::Map(subs)));
    }
    Reply::Map(m)
}

/// The (name, docs) pair COMMAND DOCS gives for `name` — a command Podium has, or a
/// `container|sub` subcommand it has — or None when Redis would skip the name. `name` is
/// matched case-insensitively; the reply names the command in lower case, as Redis does.
pub(crate) fn docs_for(name: &[u8]) -> Option<(Reply, Reply)> {
    let lower = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    let mut parts = lower.split('|');
    let container = super::lookup(parts.next()?.as_bytes())?;
    let full = match (parts.next(), parts.next()) {
        (None, _) => container.name.to_string(),
        (Some(sub), None) => {
            let full = format!("{}|{sub}", container.name);
            if !podium_has(&full) {
                return None;
            }
            full
        }
        (Some(_), Some(_)) => return None,
    };
    let i = find(&full)?;
    Some((bulk(DOCS[i].name), doc_reply(i)))
}

/// COMMAND DOCS with no names: every command Podium has, sorted by name.
pub(crate) fn all_docs() -> Reply {
    let mut names: Vec<&'static str> = super::table().keys().copied().collect();
    names.sort_unstable();
    Reply::Map(
        names
            .into_iter()
            .filter_map(|n| docs_for(n.as_bytes()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_containers_are_followed_by_their_subcommands() {
        for w in DOCS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for (i, d) in DOCS.iter().enumerate() {
            for s in &DOCS[i + 1..=i + d.subcommands] {
                assert!(s.name.starts_with(&format!("{}|", d.name)), "{}", s.name);
            }
        }
    }

    #[test]
    fn every_command_has_docs_in_the_group_its_spec_names() {
        for (name, cmd) in crate::commands::table() {
            let i = find(name).unwrap_or_else(|| panic!("no docs for {name}"));
            assert_eq!(DOCS[i].group, cmd.group, "{name}");
        }
    }

    #[test]
    fn unknown_and_too_deep_names_are_skipped() {
        assert!(docs_for(b"no-such-command").is_none());
        assert!(docs_for(b"config|no-such-sub").is_none());
        assert!(docs_for(b"config|get|x").is_none());
        assert!(docs_for(b"get|x").is_none());
        assert!(docs_for(b"GET").is_some());
        assert!(docs_for(b"Config|Get").is_some());
    }
}
