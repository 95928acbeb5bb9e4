//! The Redis 7.0 multi-part AOF manifest: which base and incremental files make up the log.
//!
//! `<dir>/<appenddirname>/<appendfilename>.manifest` holds one line per file,
//! `file <name> seq <n> type <b|h|i>`: at most one base (`b`), history files (`h`, left over
//! from a rewrite, deleted at the next start and never loaded) and the incremental files (`i`)
//! in replay order, their sequence numbers increasing. A name that holds spaces, quotes or
//! control characters is written in double quotes with C escapes, as Redis writes it, and read
//! back with the same quoting rules as a config line.
//!
//! Reading is as strict as Redis's: an empty manifest, a blank line, a line without `file`,
//! `seq` and `type`, fewer than six words or an odd number of them, a line longer than 1024
//! bytes, a second base, an unknown type, a file name with a path or a sequence that does not
//! increase is refused with Redis's message and the line it is on ([`ManifestError`]); the
//! server then refuses to start rather than load part of the data.
//!
//! The manifest is replaced atomically (written to a temporary file, fsynced, renamed, then the
//! directory fsynced), so a crash leaves either the old or the new list.

pub use crate::state::aof::{Manifest, Part};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Longest manifest line Redis reads (MANIFEST_MAX_LINE).
const MAX_LINE: usize = 1024;

/// Why a manifest was refused: Redis's reason, and the line it was found on (when the line had
/// been read in full).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub reason: String,
    pub line: Option<(usize, String)>,
}

impl ManifestError {
    fn at(reason: &str, linenum: usize, line: &str) -> ManifestError {
        ManifestError {
            reason: reason.to_string(),
            line: Some((linenum, line.to_string())),
        }
    }

    fn bare(reason: &str) -> ManifestError {
        ManifestError {
            reason: reason.to_string(),
            line: None,
        }
    }

    /// Log the refusal as Redis does before it exits: a banner, the line, the reason.
    pub fn log(&self) {
        tracing::warn!("*** FATAL AOF MANIFEST FILE ERROR ***");
        if let Some((n, line)) = &self.line {
            tracing::warn!("Reading the manifest file, at line {n}");
            tracing::warn!(">>> '{line}'");
        }
        tracing::warn!("{}", self.reason);
    }
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.line {
            Some((n, line)) => write!(f, "{} (manifest line {n}: '{line}')", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

/// The leading decimal number of `s`, as C's atoll reads it (0 when there is none).
fn atoll(s: &[u8]) -> i64 {
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut n: i64 = 0;
    while let Some(d) = s.get(i).filter(|c| c.is_ascii_digit()) {
        n = n.wrapping_mul(10).wrapping_add(i64::from(d - b'0'));
        i += 1;
    }
    if neg {
        n.wrapping_neg()
    } else {
        n
    }
}

/// Redis's sdsneedsrepr: would the name need quoting to survive a split into words?
fn needs_repr(name: &str) -> bool {
    name.bytes()
        .any(|c| c == b'\\' || c == b'"' || !(0x21..=0x7e).contains(&c))
}

impl Manifest {
    /// Parse the manifest text by Redis's rules (see the module comment).
    pub fn parse(data: &[u8]) -> Result<Manifest, ManifestError> {
        let mut m = Manifest::default();
        let mut maxseq: i64 = 0;
        let mut linenum = 0usize;
        let mut pos = 0usize;
        // Lines are read as fgets reads them into a buffer of MAX_LINE bytes: a longer line
        // comes in pieces, and a piece without its newline is refused.
        while pos < data.len() {
            let end = data[pos..]
                .iter()
                .take(MAX_LINE)
                .position(|&b| b == b'\n')
                .map(|i| pos + i + 1)
                .unwrap_or_else(|| (pos + MAX_LINE).min(data.len()));
            let chunk = &data[pos..end];
            pos = end;
            linenum += 1;
            if chunk[0] == b'#' {
                continue;
            }
            if !chunk.contains(&b'\n') {
                return Err(ManifestError::bare(
                    "The AOF manifest file contains too long line",
                ));
            }
            let trimmed = trim(chunk);
            let shown = String::from_utf8_lossy(trimmed).into_owned();
            let invalid = || ManifestError::at("Invalid AOF manifest file format", linenum, &shown);
            if trimmed.is_empty() {
                return Err(invalid());
            }
            let words = match crate::protocol::split_args(trimmed) {
                Some(w) if w.len() >= 6 && w.len() % 2 == 0 => w,
                _ => return Err(invalid()),
            };
            let (mut name, mut seq, mut typ) = (None, 0i64, 0u8);
            for kv in words.chunks(2) {
                let key = &kv[0];
                if key.eq_ignore_ascii_case(b"file") {
                    if kv[1].contains(&b'/') || kv[1].contains(&b'\\') {
                        return Err(ManifestError::at(
                            "File can't be a path, just a filename",
                            linenum,
                            &shown,
                        ));
                    }
                    name = Some(String::from_utf8(kv[1].clone()).map_err(|_| {
                        ManifestError::at(
                            "The AOF file name is not valid UTF-8 (Podium's names always are)",
                            linenum,
                            &shown,
                        )
                    })?);
                } else if key.eq_ignore_ascii_case(b"seq") {
                    seq = atoll(&kv[1]);
                } else if key.eq_ignore_ascii_case(b"type") {
                    typ = kv[1].first().copied().unwrap_or(0);
                }
                // Other keys are skipped, for forward compatibility (as Redis does).
            }
            let Some(name) = name.filter(|_| seq != 0 && typ != 0) else {
                return Err(invalid());
            };
            let part = Part { name, seq };
            match typ {
                b'b' => {
                    if m.base.is_some() {
                        return Err(ManifestError::at(
                            "Found duplicate base file information",
                            linenum,
                            &shown,
                        ));
                    }
                    m.curr_base_seq = seq;
                    m.base = Some(part);
                }
                b'h' => m.history.push(part),
                b'i' => {
                    if seq <= maxseq {
                        return Err(ManifestError::at(
                            "Found a non-monotonic sequence number",
                            linenum,
                            &shown,
                        ));
                    }
                    maxseq = seq;
                    m.curr_incr_seq = seq;
                    m.incrs.push(part);
                }
                _ => return Err(ManifestError::at("Unknown AOF file type", linenum, &shown)),
            }
        }
        if linenum == 0 {
            return Err(ManifestError::bare("Found an empty AOF manifest"));
        }
        Ok(m)
    }

    /// The manifest text: base first, then the history files, then the incremental files.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut line = |p: &Part, typ: char| {
            let name = if needs_repr(&p.name) {
                crate::util::sds_repr_str(&p.name)
            } else {
                p.name.clone()
            };
            s.push_str(&format!("file {name} seq {} type {typ}\n", p.seq));
        };
        if let Some(b) = &self.base {
            line(b, 'b');
        }
        for h in &self.history {
            line(h, 'h');
        }
        for i in &self.incrs {
            line(i, 'i');
        }
        s
    }

    /// A new base file (Redis's getNewBaseFileNameAndMarkPreAsHistory): the next base
    /// number, in the format `rdb` says; the current base, if any, becomes the newest history
    /// file. Its name.
    pub fn next_base(&mut self, filename: &str, rdb: bool) -> String {
        if let Some(old) = self.base.take() {
            self.history.insert(0, old);
        }
        self.curr_base_seq += 1;
        let seq = self.curr_base_seq;
        let name = if rdb {
            base_name_rdb(filename, seq)
        } else {
            base_name(filename, seq)
        };
        self.base = Some(Part {
            name: name.clone(),
            seq,
        });
        name
    }

    /// A new incremental file listed after the others (Redis's getNewIncrAofName). Its name.
    pub fn next_incr(&mut self, filename: &str) -> String {
        self.curr_incr_seq += 1;
        let name = incr_name(filename, self.curr_incr_seq);
        self.incrs.push(Part {
            name: name.clone(),
            seq: self.curr_incr_seq,
        });
        name
    }

    /// After a rewrite: the incremental files it covered become history, newest first
    /// (Redis's markRewrittenIncrAofAsHistory). `keep_last`: the AOF is on and its last file is
    /// the one being appended to, written after the rewrite's instant.
    pub fn incrs_to_history(&mut self, keep_last: bool) {
        let kept = if keep_last { self.incrs.pop() } else { None };
        for p in std::mem::take(&mut self.incrs) {
            self.history.insert(0, p);
        }
        self.incrs.extend(kept);
    }

    /// No base and no incremental file: nothing to load.
    pub fn is_empty(&self) -> bool {
        self.base.is_none() && self.incrs.is_empty()
    }
}

/// `line` without the spaces, tabs, CRs and LFs around it (Redis's sdstrim set).
fn trim(line: &[u8]) -> &[u8] {
    let strip = |c: &u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    let start = line.iter().position(|c| !strip(c)).unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|c| !strip(c))
        .map_or(start, |i| i + 1);
    &line[start..end]
}

/// `<dir>/<appenddirname>`.
pub fn aof_dir(dir: &str, dirname: &str) -> PathBuf {
    Path::new(if dir.is_empty() { "." } else { dir }).join(dirname)
}

pub fn manifest_path(aofdir: &Path, filename: &str) -> PathBuf {
    aofdir.join(format!("{filename}.manifest"))
}

pub fn base_name(filename: &str, seq: i64) -> String {
    format!("{filename}.{seq}.base.aof")
}

/// A base file in RDB format (`aof-use-rdb-preamble yes`), as Redis 7 names it.
pub fn base_name_rdb(filename: &str, seq: i64) -> String {
    format!("{filename}.{seq}.base.rdb")
}

pub fn incr_name(filename: &str, seq: i64) -> String {
    format!("{filename}.{seq}.incr.aof")
}

/// Why reading the manifest failed.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be read (Redis's "can't open the AOF manifest file").
    Io(String),
    /// The file is damaged.
    Format(ManifestError),
}

impl ReadError {
    /// Log it as Redis does before exiting.
    pub fn log(&self) {
        match self {
            ReadError::Io(e) => tracing::warn!("{e}"),
            ReadError::Format(e) => e.log(),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => f.write_str(e),
            ReadError::Format(e) => e.fmt(f),
        }
    }
}

/// Read the manifest; Ok(None) if there is none (no AOF directory, or no manifest in it).
pub fn read(aofdir: &Path, filename: &str) -> Result<Option<Manifest>, ReadError> {
    let path = manifest_path(aofdir, filename);
    match fs::read(&path) {
        Ok(bytes) => Manifest::parse(&bytes).map(Some).map_err(ReadError::Format),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReadError::Io(format!(
            "Fatal error: can't open the AOF manifest file {} for reading: {}",
            path.display(),
            crate::util::strerror(&e)
        ))),
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

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text.as_bytes())
    }

    fn reason(text: &str) -> String {
        parse(text).unwrap_err().reason
    }

    #[test]
    fn parse_and_render_round_trip() {
        let text = "file appendonly.aof.2.base.rdb seq 2 type b\nfile appendonly.aof.1.incr.aof seq 1 type h\nfile appendonly.aof.2.incr.aof seq 2 type i\n";
        let m = parse(text).unwrap();
        assert_eq!(
            m.base,
            Some(Part {
                name: "appendonly.aof.2.base.rdb".into(),
                seq: 2
            })
        );
        assert_eq!(m.history.len(), 1);
        assert_eq!(m.incrs.len(), 1);
        assert_eq!(m.render(), text);
    }

    #[test]
    fn names_with_spaces_are_quoted_and_read_back() {
        let m = Manifest {
            base: Some(Part {
                name: " file seq \n\n.aof .2.base.rdb".into(),
                seq: 2,
            }),
            history: Vec::new(),
            incrs: vec![Part {
                name: "a\"b".into(),
                seq: 3,
            }],
            curr_base_seq: 2,
            curr_incr_seq: 3,
        };
        let text = m.render();
        assert_eq!(
            text,
            "file \" file seq \\n\\n.aof .2.base.rdb\" seq 2 type b\nfile \"a\\\"b\" seq 3 type i\n"
        );
        assert_eq!(parse(&text).unwrap(), m);
    }

    #[test]
    fn refusals_name_redis_reasons() {
        assert_eq!(reason(""), "Found an empty AOF manifest");
        assert_eq!(
            reason("file a seq 1 type i\n\nfile b seq 3 type i\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            reason("file a seq 2 type i\nfile b seq 1 type i\n"),
            "Found a non-monotonic sequence number"
        );
        assert_eq!(
            reason("file a seq 1 type b\nfile b seq 2 type b\n"),
            "Found duplicate base file information"
        );
        assert_eq!(reason("file a seq 1 type x\n"), "Unknown AOF file type");
        assert_eq!(
            reason("filx a seq 1 type b\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            reason("file a type i\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            reason("file a seq 1 type i newkey\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            reason("file a seq x type b\n"),
            "Invalid AOF manifest file format"
        );
        assert_eq!(
            reason("file d/a seq 1 type b\n"),
            "File can't be a path, just a filename"
        );
        assert_eq!(
            reason(&format!("file {} seq 1 type b\n", "a".repeat(1100))),
            "The AOF manifest file contains too long line"
        );
        // The last line without its newline is refused too, as fgets leaves it unterminated.
        assert_eq!(
            reason("file a seq 1 type b"),
            "The AOF manifest file contains too long line"
        );
        let e = parse("file a seq 1 type i\nfile b seq 1 type i\n").unwrap_err();
        assert_eq!(e.line, Some((2, "file b seq 1 type i".to_string())));
    }

    #[test]
    fn accepted_variants() {
        // Comments, extra keys (forward compatibility), keys in any case and order.
        let m =
            parse("# hello\nfile a seq 1 type b newkey newvalue\nSEQ 3 TYPE i FILE c\n").unwrap();
        assert_eq!(m.base.unwrap().name, "a");
        assert_eq!(m.incrs[0].name, "c");
        assert_eq!(m.incrs[0].seq, 3);
    }

    /// Redis's aof-multi-part "AOF enable/disable auto gc" sequence: two rewrites with the AOF
    /// on and history kept; history is newest first, the file being appended to stays.
    #[test]
    fn rewrites_turn_old_files_into_history_newest_first() {
        let mut m =
            parse("file a.5.base.rdb seq 5 type b\nfile a.1.incr.aof seq 1 type i\n").unwrap();
        for _ in 0..2 {
            m.next_incr("a");
            m.next_base("a", true);
            m.incrs_to_history(true);
        }
        assert_eq!(
            m.render(),
            "file a.7.base.rdb seq 7 type b\nfile a.2.incr.aof seq 2 type h\n\
             file a.6.base.rdb seq 6 type h\nfile a.1.incr.aof seq 1 type h\n\
             file a.5.base.rdb seq 5 type h\nfile a.3.incr.aof seq 3 type i\n"
        );
        // AOF off: every incremental file is history; numbers are never handed out twice.
        m.next_base("a", false);
        m.incrs_to_history(false);
        m.history.clear();
        assert_eq!(m.render(), "file a.8.base.aof seq 8 type b\n");
        assert_eq!(m.next_incr("a"), "a.4.incr.aof");
    }
}
