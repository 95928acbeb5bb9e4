//! The Redis 7.0 multi-part AOF manifest: which base and incremental files make up the log.
//!
//! `<dir>/<appenddirname>/<appendfilename>.manifest` holds one line per file,
//! `file <name> seq <n> type <b|h|i>`: at most one base (`b`), the incremental files (`i`) in
//! replay order, and history files (`h`, left over from a rewrite, ignored when loading). The
//! manifest is replaced atomically (written to a temporary file, fsynced, renamed, then the
//! directory fsynced), so a crash leaves either the old or the new list.

pub use crate::state::aof::{Manifest, Part};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

impl Manifest {
    /// Parse the manifest text. Err names the line that is wrong.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut m = Manifest::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words = crate::protocol::split_args(line.as_bytes()).ok_or_else(|| {
                format!(
                    "Invalid AOF manifest file format (line {}: unbalanced quotes)",
                    n + 1
                )
            })?;
            if words.len() % 2 != 0 {
                return Err(format!(
                    "Invalid AOF manifest file format (line {}: '{line}')",
                    n + 1
                ));
            }
            let (mut name, mut seq, mut typ) = (None, None, None);
            for kv in words.chunks(2) {
                let v = String::from_utf8_lossy(&kv[1]).into_owned();
                match &kv[0][..] {
                    b"file" => name = Some(v),
                    b"seq" => seq = v.parse::<u64>().ok(),
                    b"type" => typ = Some(v),
                    _ => {} // Unknown keys are skipped, as Redis does.
                }
            }
            let (Some(name), Some(seq), Some(typ)) = (name, seq, typ) else {
                return Err(format!(
                    "Invalid AOF manifest file format (line {}: '{line}')",
                    n + 1
                ));
            };
            if name.contains('/') {
                return Err(format!(
                    "Invalid AOF manifest file format (line {}: file name with a path)",
                    n + 1
                ));
            }
            match typ.as_str() {
                "b" => {
                    if m.base.is_some() {
                        return Err(
                            "Invalid AOF manifest file format (more than one base file)".into()
                        );
                    }
                    m.base = Some(Part { name, seq });
                }
                "i" => m.incrs.push(Part { name, seq }),
                "h" => {}
                _ => {
                    return Err(format!(
                        "Invalid AOF manifest file format (line {}: unknown type '{typ}')",
                        n + 1
                    ))
                }
            }
        }
        Ok(m)
    }

    /// The manifest text (base first, then the incremental files in order).
    pub fn render(&self) -> String {
        let mut s = String::new();
        if let Some(b) = &self.base {
            s.push_str(&format!("file {} seq {} type b\n", b.name, b.seq));
        }
        for i in &self.incrs {
            s.push_str(&format!("file {} seq {} type i\n", i.name, i.seq));
        }
        s
    }

    /// Highest incremental sequence number used so far.
    pub fn max_incr_seq(&self) -> u64 {
        self.incrs.iter().map(|p| p.seq).max().unwrap_or(0)
    }

    pub fn base_seq(&self) -> u64 {
        self.base.as_ref().map(|b| b.seq).unwrap_or(0)
    }
}

/// `<dir>/<appenddirname>`.
pub fn aof_dir(dir: &str, dirname: &str) -> PathBuf {
    Path::new(if dir.is_empty() { "." } else { dir }).join(dirname)
}

pub fn manifest_path(aofdir: &Path, filename: &str) -> PathBuf {
    aofdir.join(format!("{filename}.manifest"))
}

pub fn base_name(filename: &str, seq: u64) -> String {
    format!("{filename}.{seq}.base.aof")
}

/// A base file in RDB format (`aof-use-rdb-preamble yes`), as Redis 7 names it.
pub fn base_name_rdb(filename: &str, seq: u64) -> String {
    format!("{filename}.{seq}.base.rdb")
}

pub fn incr_name(filename: &str, seq: u64) -> String {
    format!("{filename}.{seq}.incr.aof")
}

/// Read the manifest; Ok(None) if there is none.
pub fn read(aofdir: &Path, filename: &str) -> Result<Option<Manifest>, String> {
    let path = manifest_path(aofdir, filename);
    match fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("Invalid AOF manifest file format in {}", path.display()))?;
            Manifest::parse(&text)
                .map(Some)
                .map_err(|e| format!("{e} in {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "can't read the AOF manifest {}: {e}",
            path.display()
        )),
    }
}

/// fsync a directory so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replace the manifest atomically.
pub fn write(aofdir: &Path, filename: &str, m: &Manifest) -> std::io::Result<()> {
    let tmp = aofdir.join(format!("temp-{filename}.manifest"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(m.render().as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, manifest_path(aofdir, filename))?;
    sync_dir(aofdir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_render_round_trip() {
        let text = "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(
            m.base,
            Some(Part {
                name: "appendonly.aof.1.base.aof".into(),
                seq: 1
            })
        );
        assert_eq!(m.incrs.len(), 1);
        assert_eq!(m.render(), text);
    }

    #[test]
    fn history_ignored_and_errors() {
        let m = Manifest::parse(
            "file a seq 1 type h\nfile b seq 2 type b\nfile c seq 2 type i\nfile d seq 3 type i\n",
        )
        .unwrap();
        assert_eq!(m.base.unwrap().name, "b");
        assert_eq!(
            m.incrs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["c", "d"]
        );
        assert!(Manifest::parse("file a seq x type b\n").is_err());
        assert!(Manifest::parse("file a seq 1 type b\nfile b seq 2 type b\n").is_err());
        assert!(Manifest::parse("file a seq 1\n").is_err());
        assert!(Manifest::parse("file a seq 1 type z\n").is_err());
    }
}
