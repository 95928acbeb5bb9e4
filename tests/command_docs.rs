//! COMMAND DOCS against redis-server 7.0.15: for every command and subcommand Podium lists in
//! COMMAND LIST, the raw reply bytes of `COMMAND DOCS <name>` must be Redis's, in RESP2 and in
//! RESP3 (after HELLO 3). redis-cli 7 builds its syntax hints from these replies.
//!
//! Redis keeps a container's subcommands in a hash table seeded at random on each start, so
//! the order of a `subcommands` map varies from run to run of redis-server itself; both
//! replies have that one map put in name order before the bytes are compared. A container's
//! map on Podium lists only the subcommands Podium runs: the few Redis has and Podium does
//! not are in [`NOT_IN_PODIUM`], each with its reason, and are dropped from Redis's map.
//! Fails when redis-server is not installed, unless PODIUM_ALLOW_SKIP=1 (then it is skipped).

use crate::common;

use common::Launch;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Subcommands Redis 7.0.15 has and Podium does not, so they are absent from Podium's
/// `subcommands` maps; with the reason.
const NOT_IN_PODIUM: &[(&str, &str)] = &[(
    "script|debug",
    "Podium has no Lua debugger (SCRIPT DEBUG is refused as an unknown subcommand)",
)];

/// One reply: its header line (for a bulk string, with the body) and its elements (a map's
/// keys and values alternate).
#[derive(Clone)]
struct Resp {
    head: Vec<u8>,
    items: Vec<Resp>,
}

impl Resp {
    fn bytes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        for i in &self.items {
            i.bytes(out);
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.bytes(&mut v);
        v
    }

    /// The text of a bulk or simple string.
    fn text(&self) -> String {
        let h = String::from_utf8_lossy(&self.head).into_owned();
        match h.as_bytes().first() {
            Some(b'$') => h
                .split_once("\r\n")
                .map(|x| x.1)
                .unwrap_or("")
                .trim_end()
                .into(),
            _ => h[1..].trim_end().into(),
        }
    }
}

struct Client {
    out: TcpStream,
    inp: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        Client {
            out: s.try_clone().expect("clone"),
            inp: BufReader::new(s),
        }
    }

    fn call(&mut self, args: &[&str]) -> Resp {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.out.write_all(&req).expect("send");
        self.read()
    }

    fn read(&mut self) -> Resp {
        let mut head = Vec::new();
        let n = self.inp.read_until(b'\n', &mut head).expect("read reply");
        assert!(n > 2, "connection closed");
        let num = |h: &[u8]| -> usize {
            std::str::from_utf8(&h[1..h.len() - 2])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .map(|n| n.max(0) as usize)
                .unwrap_or_else(|| panic!("bad length line {h:?}"))
        };
        let mut items = Vec::new();
        match head[0] {
            b'$' | b'=' if !head.starts_with(b"$-1") => {
                let mut body = vec![0u8; num(&head) + 2];
                self.inp.read_exact(&mut body).expect("bulk body");
                head.extend_from_slice(&body);
            }
            b'*' | b'~' | b'>' => {
                for _ in 0..num(&head) {
                    items.push(self.read());
                }
            }
            b'%' => {
                for _ in 0..2 * num(&head) {
                    items.push(self.read());
                }
            }
            _ => {}
        }
        Resp { head, items }
    }
}

/// `COMMAND DOCS name`'s reply with the `subcommands` map of the one command in it put in
/// name order, and the subcommands in `drop` removed from it (its length fixed to match).
fn canonical(reply: &Resp, drop: &[&str]) -> Resp {
    let mut r = reply.clone();
    if let Some(doc) = r.items.get_mut(1) {
        let key = doc
            .items
            .iter()
            .step_by(2)
            .position(|k| k.text() == "subcommands");
        if let Some(k) = key {
            let subs = &mut doc.items[2 * k + 1];
            let mut pairs: Vec<(Resp, Resp)> = subs
                .items
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .filter(|(name, _)| !drop.contains(&name.text().as_str()))
                .collect();
            pairs.sort_by_key(|(name, _)| name.text());
            let len = if subs.head[0] == b'%' {
                pairs.len()
            } else {
                2 * pairs.len()
            };
            subs.head = format!("{}{len}\r\n", subs.head[0] as char).into_bytes();
            subs.items = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
        }
    }
    r
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(&b.escape_ascii().collect::<Vec<u8>>()).into_owned()
}

/// Compares every name on both servers in one protocol; returns the mismatches.
fn compare(podium: &mut Client, redis: &mut Client, names: &[String], proto: &str) -> Vec<String> {
    let drop: Vec<&str> = NOT_IN_PODIUM.iter().map(|(n, _)| *n).collect();
    let mut bad = Vec::new();
    for name in names {
        let p = canonical(&podium.call(&["COMMAND", "DOCS", name]), &[]).to_bytes();
        let r = canonical(&redis.call(&["COMMAND", "DOCS", name]), &drop).to_bytes();
        if p != r {
            bad.push(format!(
                "{proto} COMMAND DOCS {name}\n    redis-server: {}\n    podium:       {}",
                show(&r),
                show(&p)
            ));
        }
    }
    bad
}

#[test]
fn command_docs_match_redis() {
    let Some(redis_bin) = common::require_tool("redis-server") else {
        return;
    };
    let podium_server = Launch::podium().start();
    let redis_server = Launch::prog(&redis_bin)
        .args(&["--save", "", "--appendonly", "no"])
        .start();
    let mut podium = Client::connect(podium_server.port);
    let mut redis = Client::connect(redis_server.port);

    let mut names: Vec<String> = podium
        .call(&["COMMAND", "LIST"])
        .items
        .iter()
        .map(Resp::text)
        .collect();
    names.sort();
    assert!(names.len() > 200, "COMMAND LIST gave {} names", names.len());
    // The subcommands excused in NOT_IN_PODIUM must really be missing from Podium.
    for (n, _) in NOT_IN_PODIUM {
        assert!(!names.contains(&n.to_string()), "{n} is in Podium now");
    }
    // Names Redis skips, mixed case, and several names in one request.
    let mut extra: Vec<String> = [
        "no-such-command",
        "config|nosuch",
        "config|get|x",
        "GeT",
        "Config|Get",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let listed_by_podium = names.clone();
    names.append(&mut extra);

    let mut bad = compare(&mut podium, &mut redis, &names, "RESP2");
    let several = ["COMMAND", "DOCS", "get", "nosuch", "zadd", "client|kill"];
    let (p, r) = (podium.call(&several), redis.call(&several));
    if p.to_bytes() != r.to_bytes() {
        bad.push(format!(
            "RESP2 {}\n    redis-server: {}\n    podium:       {}",
            several.join(" "),
            show(&r.to_bytes()),
            show(&p.to_bytes())
        ));
    }

    podium.call(&["HELLO", "3"]);
    redis.call(&["HELLO", "3"]);
    bad.extend(compare(&mut podium, &mut redis, &names, "RESP3"));

    // COMMAND DOCS with no name: each command Podium has, once, as on its own.
    let all = podium.call(&["COMMAND", "DOCS"]);
    let listed: Vec<String> = all.items.iter().step_by(2).map(Resp::text).collect();
    let expected: Vec<String> = listed_by_podium
        .iter()
        .filter(|n| !n.contains('|'))
        .cloned()
        .collect();
    assert_eq!(listed, expected, "COMMAND DOCS lists every command, sorted");
    for pair in all.items.chunks(2) {
        let alone = podium.call(&["COMMAND", "DOCS", &pair[0].text()]);
        assert_eq!(
            alone.items[1].to_bytes(),
            pair[1].to_bytes(),
            "COMMAND DOCS {} alone and in the full list",
            pair[0].text()
        );
    }

    println!(
        "compared COMMAND DOCS for {} names ({} from COMMAND LIST), RESP2 and RESP3",
        names.len(),
        listed_by_podium.len()
    );
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
